"""Opening an event log's database: its engine, the typed error of a failed open, and the
checks and reads that need no store (the schema revision, a foreign database, removing a
log this process created)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy import Engine, inspect
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from statemachine.exceptions import (
    ConfigurationError,
    NotAnEventLogError,
    StoreError,
    StoreNotFoundError,
)
from statemachine.log import migrate
from statemachine.log.dialect import DEFAULT_BUSY_TIMEOUT_MS, backend_for
from statemachine.log.engine import describe, make_engine, to_url

__all__ = [
    "check_readable",
    "open_engine",
    "refuse_foreign_target",
    "remove_new_event_log",
    "schema_revision",
    "typed_open_errors",
]


def open_engine(
    url: str, *, create: bool, sqlite_synchronous: str = "FULL",
    busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
) -> Engine:  # fmt: skip
    """An engine for ``url``; a read-only open of a missing database file is refused."""
    path = backend_for(url).database_file(url)
    if path is not None:
        if not create and not path.is_file():
            raise StoreNotFoundError(_missing_file(url, path))
        if create:
            path.parent.mkdir(parents=True, exist_ok=True)
    return make_engine(
        url, writable=create, sqlite_synchronous=sqlite_synchronous,
        busy_timeout_ms=busy_timeout_ms,
    )  # fmt: skip


def _missing_file(url: str, path: Path) -> str:
    """Why a SQLite log file is missing; ``sqlite:///tmp/x.db`` (three slashes) names the
    relative path ``tmp/x.db``: say that an absolute path needs four."""
    message = f"no event log at {path}: the file does not exist (check the path)"
    if path.is_absolute() or not url.startswith("sqlite:///"):
        return message
    absolute = Path("/") / path
    exists = " (that file exists)" if absolute.is_file() else ""
    return (
        f"no event log at {path} (relative to {Path.cwd()}): a sqlite:/// URL with three "
        f"slashes names a relative path; for the absolute path {absolute}{exists} write "
        f"sqlite:///{absolute} (four slashes)"
    )


def _open_error(exc: SQLAlchemyError | StoreError, url: str) -> StoreError:
    """The typed error for a failed open (raw or already translated driver errors)."""
    if isinstance(exc, StoreError) and type(exc) is not StoreError:
        return exc  # already precise: SchemaVersionError, NotAnEventLogError, ...
    cause = exc.__cause__ if isinstance(exc, StoreError) else exc
    original = cause.orig if isinstance(cause, DBAPIError) and cause.orig else cause
    message = (str(original).strip().splitlines() or [type(original).__name__])[0]
    backend = backend_for(url)
    if backend.missing_database(message):
        return StoreNotFoundError(f"no event log at {describe(url)}: the database does not exist")
    if backend.not_a_database(message):
        return NotAnEventLogError(
            f"{describe(url)} is not a statemachine event log ({message}); check the path or URL"
        )
    if isinstance(exc, StoreError):
        return exc
    return StoreError(f"cannot open the event log at {describe(url)}: {message}")


@contextlib.contextmanager
def typed_open_errors(engine: Engine, url: str) -> Iterator[None]:
    """Raise a failed open's typed error; the engine is disposed of on any failure."""
    try:
        yield
    except (SQLAlchemyError, StoreError) as exc:
        engine.dispose()
        typed = _open_error(exc, url)
        if typed is exc:
            raise
        raise typed from exc
    except BaseException:
        engine.dispose()
        raise


def schema_revision(url_or_path: str | Path) -> str | None:
    """The schema revision of the database at a URL or path (``None``: never migrated).

    Reads only, and checks nothing but that the database exists and is not another
    application's (:class:`StoreNotFoundError`, :class:`NotAnEventLogError`): a revision
    older or newer than this code's is returned, not refused.
    """
    url = to_url(url_or_path)
    engine = open_engine(url, create=False)
    with typed_open_errors(engine, url), engine.connect() as conn:
        revision = migrate.current_revision(conn)
        migrate.refuse_foreign(conn, revision, url)
    engine.dispose()
    return revision


def refuse_foreign_target(url_or_path: str | Path) -> None:
    """Refuse to write into a database that holds tables but no event log (another
    application's), with :class:`NotAnEventLogError`; reads only, changes nothing.

    A database that does not exist yet, an empty one and an event log pass.
    """
    url = to_url(url_or_path)
    path = backend_for(url).database_file(url)
    if path is not None and not path.exists():
        return
    engine = open_engine(url, create=False)
    with typed_open_errors(engine, url), engine.connect() as conn:
        revision = migrate.current_revision(conn)
        migrate.refuse_foreign(conn, revision, url)
        tables = sorted(inspect(conn).get_table_names()) if revision is None else []
    engine.dispose()
    if tables:
        raise NotAnEventLogError(
            f"{describe(url)} is not a statemachine event log: it holds another application's "
            f"tables ({', '.join(tables[:5])}{', ...' if len(tables) > 5 else ''}) and no event "
            "log schema; nothing was written. Give the event log a database of its own"
        )


def remove_new_event_log(url_or_path: str | Path, experiment: str) -> bool:
    """Drop an event log this process created in a database server for ``experiment`` and
    must not leave behind (what a failed ``import`` made): its tables, its data and its
    version stamp. Kept (``False``) if it holds any other experiment: someone else writes
    there now. A database file is removed by its creator instead."""
    url = to_url(url_or_path)
    if backend_for(url).database_file(url) is not None:
        raise ConfigurationError(f"{describe(url)} is a database file: delete the file instead")
    engine = open_engine(url, create=False)
    try:
        with typed_open_errors(engine, url):
            return migrate.remove(engine, experiment)
    finally:
        engine.dispose()


def check_readable(engine: Engine, url: str) -> None:
    """Refuse to read a database that is not an event log, or one of a schema revision this
    code cannot read."""
    with engine.connect() as conn:
        revision = migrate.current_revision(conn)
        if revision is None:
            raise NotAnEventLogError(
                f"{describe(url)} is not a statemachine event log (it has no event log "
                "schema); check the path or URL"
            )
        migrate.refuse_foreign(conn, revision, url)
    migrate.check_revision(revision, url, writable=False)
