"""Find and open the event log a command reads: a URL, a SQLite file, an experiment folder or
a storage folder holding one experiment (``~/ray_results``).

Read commands open the store with ``create=False``: no file is created and no schema is
migrated, whatever the ``--db`` value.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from statemachine.log_location import DB_URL_ENV, DEFAULT_LOG_FILENAME

if TYPE_CHECKING:
    from statemachine.log import EventStore

__all__ = [
    "DB_URL_ENV",
    "DEFAULT_LOG_FILENAME",
    "BadInput",
    "open_resolved",
    "open_store",
    "resolve_db",
    "resolve_write_target",
]


_NOT_ON_STORAGE = "cannot write to an event log on storage; write to a local file (--db FILE)"


class BadInput(click.ClickException):
    """A bad command-line value: one line on stderr, exit code 2."""

    exit_code = 2


def resolve_db(db: str | None) -> str:
    """The URL or SQLite path that ``--db`` names; raises :class:`BadInput` when it names none."""
    if not db:
        raise BadInput(
            f"no event log given: pass --db URL|FILE|FOLDER or set {DB_URL_ENV}"
        )
    if "://" in db:
        return db  # a database URL (a storage URI is handled by open_store)
    path = Path(db).expanduser()
    if path.is_dir():
        return str(_log_in_folder(path))
    if not path.exists():
        raise BadInput(f"no such event log file: {path} (check the --db path)")
    return str(path)


def _log_in_folder(folder: Path) -> Path:
    """The event log of an experiment folder, or of the only experiment one level down (a
    storage folder such as ``~/ray_results``); :class:`BadInput` listing them when several."""
    log_file = folder / DEFAULT_LOG_FILENAME
    if log_file.is_file():
        return log_file
    try:
        below = sorted(p for p in folder.glob(f"*/{DEFAULT_LOG_FILENAME}") if p.is_file())
    except OSError:  # an unreadable folder: said below as "no event log"
        below = []
    if len(below) == 1:
        return below[0]
    if below:
        shown = ", ".join(str(p.parent) for p in below[:8])
        more = f" and {len(below) - 8} more" if len(below) > 8 else ""
        raise BadInput(
            f"{folder} is a storage folder of {len(below)} experiments: pass one of them "
            f"with --db ({shown}{more})"
        )
    raise BadInput(
        f"no event log in folder {folder}: no {DEFAULT_LOG_FILENAME} in it or one level down "
        "(an experiment folder, or a storage folder such as ~/ray_results holding one); pass "
        "the log file or its URL with --db"
    )


def resolve_write_target(db: str | None, command: str) -> str:
    """The URL or SQLite path a writing command (``import``, ``db upgrade``) creates or
    migrates: ``--db`` as given, a folder's ``statemachine.db``."""
    from statemachine.log.remote import is_storage_uri

    if not db:
        raise BadInput(f"{command} needs a target store: pass --db URL|FILE or set {DB_URL_ENV}")
    if is_storage_uri(db):
        raise BadInput(_NOT_ON_STORAGE)
    folder = Path(db).expanduser()
    if "://" not in db and folder.is_dir():
        return str(folder / DEFAULT_LOG_FILENAME)
    return db


@contextmanager
def open_store(db: str | None, *, create: bool = False) -> Iterator[EventStore]:
    """Open the store ``db`` names, read-only unless ``create``; closed on exit.

    A storage URI (``s3://bucket/path/experiment``) is the log a Tune experiment keeps on its
    storage: it is downloaded to a temporary file, read from there and deleted afterwards.
    """
    from statemachine.log.remote import is_storage_uri

    if db and is_storage_uri(db):
        if create:
            raise BadInput(_NOT_ON_STORAGE)
        with open_resolved(db) as store:
            yield store
        return
    with _opened(db if create and db else resolve_db(db), create=create) as store:
        yield store


@contextmanager
def open_resolved(target: str) -> Iterator[EventStore]:
    """Open ``target`` read-only as it is: a URL or file :func:`resolve_db` returned, or a
    storage URI (downloaded). It is not resolved again, so a file gone since is a
    :class:`~statemachine.exceptions.StoreNotFoundError` naming it, not bad input (``serve``
    opens the log once per request)."""
    from statemachine.log.remote import downloaded, is_storage_uri

    if is_storage_uri(target):
        with downloaded(target) as local, _opened(str(local), create=False) as store:
            yield store
        return
    with _opened(target, create=False) as store:
        yield store


@contextmanager
def _opened(target: str, *, create: bool) -> Iterator[EventStore]:
    from statemachine.log import EventStore

    store = EventStore.open(target, create=create)
    try:
        yield store
    finally:
        store.close()
