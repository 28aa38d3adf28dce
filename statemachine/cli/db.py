"""Find and open the event log a command reads: a URL, a SQLite file or an experiment folder.

Read commands open the store with ``create=False``: no file is created and no schema is
migrated, whatever the ``--db`` value.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from statemachine.log import EventStore

#: Environment variable holding the default ``--db``.
DB_ENV = "STATEMACHINE_DB_URL"


class BadInput(click.ClickException):
    """A bad command-line value: one line on stderr, exit code 2."""

    exit_code = 2


#: The event log's file name inside an experiment folder. The Tune integration decides it
#: (``statemachine.tune.store_url.DEFAULT_FILENAME``; a test keeps both equal); it is restated
#: here so that reading a log never imports Ray.
DEFAULT_LOG_FILENAME = "statemachine.db"


def resolve_db(db: str | None) -> str:
    """The URL or SQLite path that ``--db`` names; raises :class:`BadInput` when it names none."""
    if not db:
        raise BadInput(
            f"no event log given: pass --db URL|FILE|FOLDER or set {DB_ENV}"
        )
    if "://" in db:
        return db
    path = Path(db).expanduser()
    if path.is_dir():
        log_file = path / DEFAULT_LOG_FILENAME
        if not log_file.is_file():
            raise BadInput(
                f"no event log in folder {path}: expected {log_file}; pass the log file or "
                "its URL with --db"
            )
        return str(log_file)
    if not path.exists():
        raise BadInput(f"no such event log file: {path} (check the --db path)")
    return str(path)


@contextmanager
def open_store(db: str | None, *, create: bool = False) -> Iterator[EventStore]:
    """Open the store ``db`` names, read-only unless ``create``; closed on exit."""
    target = db if create and db else resolve_db(db)
    from statemachine.log import EventStore

    store = EventStore.open(target, create=create)
    try:
        yield store
    finally:
        store.close()
