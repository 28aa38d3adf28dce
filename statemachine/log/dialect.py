"""Every difference between the databases the event log supports, and the refusal of others.

The event log runs on SQLite (the embedded default) and PostgreSQL. Whatever the two do
differently is decided here and nowhere else:

- connections: SQLite gets its pragmas (WAL, ``synchronous``, busy timeout, foreign keys) and
  takes its write lock up front (``BEGIN IMMEDIATE`` on the writer connection); PostgreSQL
  pings pooled connections before use;
- fencing: an append or snapshot reads the experiment's epoch ``FOR SHARE`` on PostgreSQL (a
  new session's ``UPDATE`` of the epoch waits for it); SQLite's write lock already holds;
- upserts (snapshots) use the dialect's ``INSERT ... ON CONFLICT DO UPDATE``;
- the position of an appended event: ``RETURNING`` on PostgreSQL, the cursor's ``lastrowid``
  on SQLite (cheaper than a result set);
- migrations: PostgreSQL serialises concurrent upgrades with an advisory lock per schema;
  SQLite's ``BEGIN IMMEDIATE`` does it; Alembic alters SQLite tables in batch mode;
- the driver's words for "no such database" and "not a database".

(The one difference in the tables themselves, SQLite autoincrementing only an ``INTEGER``
primary key, is a type variant of ``events.position`` in ``schema.py``, frozen in the
migration that creates it.)

Any other database is refused with :class:`UnsupportedDatabaseError` before an engine is made.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, TypeVar

from sqlalchemy import Connection, CursorResult, Engine, Insert, Select, Table, event, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from statemachine.exceptions import ConfigurationError, UnsupportedDatabaseError

#: Execution option marking a writer connection (SQLite: its transactions ``BEGIN IMMEDIATE``).
WRITER = "statemachine_writer"
#: SQLite's ``synchronous`` levels, weakest first.
SYNCHRONOUS_LEVELS = ("OFF", "NORMAL", "FULL", "EXTRA")
DEFAULT_BUSY_TIMEOUT_MS = 10_000

_Query = TypeVar("_Query", bound=Select[Any])


class Backend:
    """What one supported database does its own way (one instance per kind, stateless)."""

    #: SQLAlchemy's backend name (``engine.dialect.name``).
    name: ClassVar[str]
    #: The name people know it by, for messages.
    title: ClassVar[str]
    #: Test a pooled connection before use (a server may have closed it).
    pool_pre_ping: ClassVar[bool]
    #: Alembic must alter tables by copying them (``render_as_batch``).
    batch_migrations: ClassVar[bool]

    def database_file(self, url: str | URL) -> Path | None:
        """The file that holds the database (``None``: a server, or in memory)."""
        return None

    def configure_engine(
        self, engine: Engine, *, writable: bool, synchronous: str, busy_timeout_ms: int
    ) -> None:
        """Install the connection settings the event log relies on."""

    def lock_for_share(self, query: _Query) -> _Query:
        """``query`` holding the rows it reads against concurrent updates until commit."""
        return query

    def insert(self, table: Table) -> Any:
        """The dialect's ``INSERT`` (with ``on_conflict_do_update`` for upserts)."""
        raise NotImplementedError

    def appended(self, statement: Insert) -> Insert:
        """The append statement, made to report the new event's position."""
        return statement

    def position(self, result: CursorResult[Any]) -> int | None:
        """The new event's position from the append's result (``None``: nothing inserted)."""
        raise NotImplementedError

    def lock_migrations(self, conn: Connection, key: int) -> None:
        """Serialise concurrent schema upgrades (held until the transaction ends)."""

    def missing_database(self, message: str) -> bool:
        """Whether the driver's message says the database does not exist."""
        return "does not exist" in message

    def not_a_database(self, message: str) -> bool:
        """Whether the driver's message says the target is not a database at all."""
        return False


class SQLiteBackend(Backend):
    """The embedded default: one file, one writer at a time."""

    name = "sqlite"
    title = "SQLite"
    pool_pre_ping = False
    batch_migrations = True

    def database_file(self, url: str | URL) -> Path | None:
        database = make_url(url).database
        return None if database in (None, "", ":memory:") else Path(database)

    def configure_engine(
        self, engine: Engine, *, writable: bool, synchronous: str, busy_timeout_ms: int
    ) -> None:
        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.isolation_level = None  # we issue BEGIN ourselves, below
            cursor = dbapi_connection.cursor()
            cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            if writable:
                cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute(f"PRAGMA synchronous = {synchronous}")
            cursor.execute("PRAGMA foreign_keys = ON")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            immediate = conn.get_execution_options().get(WRITER)
            # Straight to the driver: this runs before every write, SQLAlchemy's execution
            # path would add a quarter of a durable commit's cost for a statement with no
            # result. BEGIN IMMEDIATE takes the write lock before anything is read, so a
            # check and the write it guards see the same database.
            conn.connection.driver_connection.execute(  # type: ignore[union-attr]
                "BEGIN IMMEDIATE" if immediate else "BEGIN"
            )

    def insert(self, table: Table) -> Any:
        return sqlite.insert(table)

    def position(self, result: CursorResult[Any]) -> int | None:
        return result.lastrowid if result.rowcount == 1 else None

    def not_a_database(self, message: str) -> bool:
        return "file is not a database" in message


class PostgreSQLBackend(Backend):
    """A server shared by drivers on many machines."""

    name = "postgresql"
    title = "PostgreSQL"
    pool_pre_ping = True
    batch_migrations = False

    def lock_for_share(self, query: _Query) -> _Query:
        return query.with_for_update(read=True)

    def insert(self, table: Table) -> Any:
        return postgresql.insert(table)

    def appended(self, statement: Insert) -> Insert:
        return statement.returning(statement.table.c.position)

    def position(self, result: CursorResult[Any]) -> int | None:
        return result.scalar()

    def lock_migrations(self, conn: Connection, key: int) -> None:
        # One lock per schema: openers of this schema wait, other schemas do not.
        conn.execute(
            text(
                "SELECT pg_advisory_xact_lock(CAST(:key AS integer), hashtext(current_schema()))"
            ),
            {"key": key},
        )


_BACKENDS: dict[str, Backend] = {b.name: b for b in (SQLiteBackend(), PostgreSQLBackend())}
#: The databases the event log supports, by SQLAlchemy backend name.
SUPPORTED = tuple(_BACKENDS)


def backend_for(url: str | URL) -> Backend:
    """The backend of a database URL; :class:`UnsupportedDatabaseError` for any other kind."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ConfigurationError(
            f"{str(url)[:80]!r} is not a database URL: use sqlite:///path/to/log.db, a .db "
            "file path, or postgresql://user@host/db"
        ) from None
    found = _BACKENDS.get(parsed.get_backend_name())
    if found is None:
        raise UnsupportedDatabaseError(
            f"the event log supports SQLite and PostgreSQL only, not "
            f"{parsed.get_backend_name()!r} ({parsed.render_as_string(hide_password=True)}): "
            "use sqlite:///path/to/log.db, a .db file path, or postgresql://user@host/db"
        )
    return found


def database_file(url: str | URL) -> Path | None:
    """The file behind a database URL: ``None`` for a server, memory, or an unsupported URL."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return None
    found = _BACKENDS.get(parsed.get_backend_name())
    return found.database_file(parsed) if found is not None else None


def backend_of(bind: Engine | Connection) -> Backend:
    """The backend of an engine or connection made for the event log."""
    return backend_for(bind.engine.url)
