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
- a single append: its own transaction on PostgreSQL (one round trip), inside ``BEGIN
  IMMEDIATE`` on SQLite; a group commit that needs no positions: ``COPY`` on PostgreSQL,
  ``executemany`` on SQLite;
- migrations: PostgreSQL serialises concurrent upgrades with an advisory lock per schema;
  SQLite's ``BEGIN IMMEDIATE`` does it; Alembic alters SQLite tables in batch mode;
- the driver's words for "no such database" and "not a database".

(The one difference in the tables themselves, SQLite autoincrementing only an ``INTEGER``
primary key, is a type variant of ``events.position`` in ``schema.py``, frozen in the
migration that creates it.)

Any other database is refused with :class:`UnsupportedDatabaseError` before an engine is made.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar
from urllib.parse import quote

from sqlalchemy import (
    Connection,
    Dialect,
    Engine,
    Insert,
    Integer,
    Select,
    Table,
    bindparam,
    event,
    func,
    select,
    text,
)
from sqlalchemy.dialects import sqlite
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
    #: The DBAPI parameter style the engine compiles to: positional on every backend, so
    #: the hot path hands the driver tuples (:class:`~statemachine.log.engine.Prepared`).
    paramstyle: ClassVar[str]
    #: One statement may run as its own transaction (the driver's autocommit), committed
    #: durably before the driver returns: a fenced single append then costs one round trip
    #: instead of three (``BEGIN``, the statement, ``COMMIT``).
    statement_transactions: ClassVar[bool] = False

    def database_file(self, url: str | URL) -> Path | None:
        """The file that holds the database (``None``: a server, or in memory)."""
        return None

    def last_seqs_query(self, events: Table) -> Select[Any] | None:
        """The query of many trials' last seqs (binds ``experiment_id``, ``trials``: a
        list; a row ``(trial, last seq or NULL)`` per trial), or ``None``: the caller
        builds one row of ``max(seq)`` subqueries per chunk of trials."""
        return None

    def configure_engine(
        self, engine: Engine, *, writable: bool, synchronous: str, busy_timeout_ms: int
    ) -> None:
        """Install the connection settings the event log relies on."""

    def read_only_creator(self, url: str | URL) -> Callable[[], Any] | None:
        """A DB-API connection factory for read-only use (``None``: the driver's own)."""
        return None

    def settle_lost_file(self, dbapi_connection: Any) -> None:
        """The database file was deleted, moved or replaced under the open writer
        connection (:mod:`~statemachine.log.file_watch`): leave nothing at its path that a
        later opener of that path would take for its own."""

    def lock_for_share(self, query: _Query) -> _Query:
        """``query`` holding the rows it reads against concurrent updates until commit."""
        return query

    def insert(self, table: Table) -> Any:
        """The dialect's ``INSERT`` (with ``on_conflict_do_update`` for upserts)."""
        raise NotImplementedError

    def appended(self, statement: Insert) -> Insert:
        """The append statement, made to report the new event's position."""
        return statement

    def begin(self, dbapi_connection: Any) -> None:
        """Begin a write transaction on a DBAPI connection (the store's hot path)."""

    def set_autocommit(self, dbapi_connection: Any, on: bool) -> None:
        """Run each statement as its own transaction, or not (:attr:`statement_transactions`)."""
        raise NotImplementedError

    def inserted_position(self, cursor: Any) -> int | None:
        """The new event's position after the append ran on ``cursor`` (``None``: no row)."""
        raise NotImplementedError

    def insert_many(self, cursor: Any, sql: str, params: list[Any]) -> list[int]:
        """Run the batch insert ``sql`` (made by :meth:`appended`) for every parameter set;
        the new positions, in parameter order."""
        raise NotImplementedError

    def row_inserter(
        self, table: Table, columns: Sequence[str], insert_sql: str, dialect: Dialect
    ) -> Callable[[Any, list[Any]], None]:
        """How a batch of rows (tuples of ``columns``) is inserted when no result is wanted
        (``insert_sql``: the compiled Core insert of those columns): ``executemany``."""

        def insert_rows(cursor: Any, rows: list[Any]) -> None:
            cursor.executemany(insert_sql, rows)

        return insert_rows

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
    paramstyle = "qmark"
    # A single statement cannot take SQLite's write lock before it reads: under a writer in
    # another process it fails at once (SQLITE_BUSY_SNAPSHOT) instead of waiting. Appends
    # keep BEGIN IMMEDIATE, a call into the library, not a round trip.
    statement_transactions = False

    def database_file(self, url: str | URL) -> Path | None:
        database = make_url(url).database
        return None if database in (None, "", ":memory:") else Path(database)

    def read_only_creator(self, url: str | URL) -> Callable[[], Any] | None:
        path = self.database_file(url)
        if path is None:
            return None
        return lambda: read_only_connection(path)

    def settle_lost_file(self, dbapi_connection: Any) -> None:
        # The write-ahead log is still at the old path: its frames would be replayed into
        # whatever file is put there next (nothing ties a -wal to its database). Copy them
        # into the file this connection holds (a moved file is then whole) and empty it.
        with contextlib.suppress(Exception):
            dbapi_connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")

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
            else:
                cursor.execute("PRAGMA query_only = ON")
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

    def begin(self, dbapi_connection: Any) -> None:
        dbapi_connection.execute("BEGIN IMMEDIATE")

    def inserted_position(self, cursor: Any) -> int | None:
        return int(cursor.lastrowid) if cursor.rowcount == 1 else None

    def insert_many(self, cursor: Any, sql: str, params: list[Any]) -> list[int]:
        # RETURNING would make the driver step row by row. Under the write lock (BEGIN
        # IMMEDIATE) an INTEGER PRIMARY KEY takes max(rowid) + 1 per row: the batch's
        # positions are consecutive, ending at the connection's last inserted rowid.
        cursor.executemany(sql, params)
        cursor.execute(_LAST_ROWID)
        last = int(cursor.fetchone()[0])
        return list(range(last - len(params) + 1, last + 1))

    def not_a_database(self, message: str) -> bool:
        return "file is not a database" in message


def read_only_connection(path: Path) -> sqlite3.Connection:
    """A connection that reads the SQLite file ``path`` and changes no file.

    - A ``-wal`` file beside it (a live driver, or one that crashed): ``mode=ro``. It reads
      every committed event, the WAL's included, and never checkpoints the WAL into the main
      file; SQLite updates only its shared-memory index (``-shm``), which it needs to read a
      WAL. (A ``-wal`` without ``-shm`` in a folder nobody can write cannot be read at all:
      the error says so.)
    - No ``-wal``, and the file or its folder not writable (``chmod 444``, a read-only
      mount): ``immutable=1``; nothing can write there, and SQLite creates no file.
    - No ``-wal``, file and folder writable: an ordinary connection with ``query_only``
      (SQLite refuses every write). ``mode=ro`` would leave the ``-wal``/``-shm`` files it
      creates behind; this connection deletes them on close, and with an empty WAL there is
      nothing to copy into the main file, which stays byte-identical.
    """
    wal = path.with_name(path.name + "-wal")
    target = quote(str(path.resolve()) if path.exists() else str(path))
    if wal.exists():
        uri = f"file:{target}?mode=ro"
    elif not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)):
        uri = f"file:{target}?mode=ro&immutable=1"
    else:
        uri = f"file:{target}?mode=rw"
    return sqlite3.connect(uri, uri=True, check_same_thread=False)


class PostgreSQLBackend(Backend):
    """A server shared by drivers on many machines."""

    name = "postgresql"
    title = "PostgreSQL"
    pool_pre_ping = True
    batch_migrations = False
    paramstyle = "format"
    statement_transactions = True

    def set_autocommit(self, dbapi_connection: Any, on: bool) -> None:
        dbapi_connection.autocommit = on

    def lock_for_share(self, query: _Query) -> _Query:
        return query.with_for_update(read=True)

    def last_seqs_query(self, events: Table) -> Select[Any] | None:
        # One row per wanted trial, each its own backward seek of the (experiment, trial,
        # seq) index: the cost follows the batch, not the experiment. (A GROUP BY over
        # `trial_id = ANY(:trials)` read every row of those trials: 13 ms per 1,000-event
        # batch of 20 trials at 25,000 events, growing with the log.)
        from sqlalchemy.dialects import postgresql  # loaded by a PostgreSQL engine, not before

        trials = bindparam("trials", type_=postgresql.ARRAY(events.c.trial_id.type))
        wanted = func.unnest(trials).table_valued("trial_id").render_derived(name="wanted")
        last = (
            select(func.max(events.c.seq))
            .where(
                events.c.experiment_id == bindparam("experiment_id", type_=Integer()),
                events.c.trial_id == wanted.c.trial_id,
            )
            .scalar_subquery()
        )
        return select(wanted.c.trial_id, last)

    def insert(self, table: Table) -> Any:
        from sqlalchemy.dialects import postgresql

        return postgresql.insert(table)

    def appended(self, statement: Insert) -> Insert:
        return statement.returning(statement.table.c.position)

    def inserted_position(self, cursor: Any) -> int | None:
        row = cursor.fetchone()
        return None if row is None else int(row[0])

    def insert_many(self, cursor: Any, sql: str, params: list[Any]) -> list[int]:
        # psycopg pipelines an executemany; each parameter set's RETURNING is its own result.
        cursor.executemany(sql, params, returning=True)
        positions = []
        while True:
            positions.append(int(cursor.fetchone()[0]))
            if not cursor.nextset():
                return positions

    def row_inserter(
        self, table: Table, columns: Sequence[str], insert_sql: str, dialect: Dialect
    ) -> Callable[[Any, list[Any]], None]:
        # COPY, PostgreSQL's bulk load: a fifth less server time per row than psycopg's
        # pipelined executemany of the insert (21 against 27 us here), the same constraints
        # checked. SQLAlchemy has no COPY construct: the names are the table's, quoted by
        # the dialect.
        quote = dialect.identifier_preparer
        names = ", ".join(quote.quote(name) for name in columns)
        copy_sql = f"COPY {quote.format_table(table)} ({names}) FROM STDIN"

        def copy_rows(cursor: Any, rows: list[Any]) -> None:
            with cursor.copy(copy_sql) as copy:
                write = copy.write_row
                for row in rows:
                    write(row)

        return copy_rows

    def lock_migrations(self, conn: Connection, key: int) -> None:
        # One lock per schema: openers of this schema wait, other schemas do not.
        conn.execute(
            text(
                "SELECT pg_advisory_xact_lock(CAST(:key AS integer), hashtext(current_schema()))"
            ),
            {"key": key},
        )


_LAST_ROWID = str(select(func.last_insert_rowid()).compile(dialect=sqlite.dialect()))

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
