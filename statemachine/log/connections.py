"""One store's connections, and the one way its SQL runs: :meth:`Connections.transaction`.

Every statement of the store runs inside :meth:`~Connections.transaction`, which does for all of
them what Optuna's ``_create_scoped_session`` does for its storage: begins the transaction,
commits it when the block ends and rolls it back on any error, and turns a driver or SQLAlchemy
error into a :class:`~statemachine.exceptions.StoreError` that names what was being done and
the database (its password hidden). Reads run on a pooled connection and never block the
writer; writes run on the store's one writer connection, under :attr:`Connections.lock` (so
threads may share a store), and are followed by the check that a SQLite file is still at its
path. The hot path (``raw=True``) runs statements compiled once
(:class:`~statemachine.log.engine.Prepared`) on the writer's DBAPI cursor, with the same
beginning, ending, error translation and reconnection.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal, overload

from sqlalchemy import Connection, Engine, Select, select
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from statemachine.exceptions import StoreError, UnknownExperimentError, close_matches
from statemachine.log.dialect import WRITER, backend_of
from statemachine.log.engine import Prepared, describe, translated
from statemachine.log.file_watch import FileWatch
from statemachine.log.schema import experiments

__all__ = ["Connections"]


class Connections:
    """One store's engine: its one writer connection (behind :attr:`lock`) and pooled readers.

    Shared by the store's parts (appends, queries, snapshots, sessions); they run their SQL
    through :meth:`transaction` and ask :attr:`backend` whatever the database does its own
    way.
    """

    def __init__(self, engine: Engine, url: str, *, writable: bool,
                 watch: FileWatch | None = None) -> None:
        self.engine = engine
        #: The full URL (password included) for error translation, which hides it.
        self.url = url
        self.backend = backend_of(engine)
        self.writable = writable
        #: The SQLite file's identity, checked after every commit (``None``: a server).
        self.watch = watch
        #: Held around every write transaction (threads may share a store; re-entrant, so a
        #: caller may hold it across a write and its fallback).
        self.lock = threading.RLock()
        self._writer: Connection | None = None
        self._experiment_ids: dict[str, int] = {}

    @overload
    def transaction(
        self, what: str, *, write: bool = False
    ) -> contextlib.AbstractContextManager[Connection]: ...

    @overload
    def transaction(
        self, what: str, *, raw: Literal[True], one_statement: bool = False
    ) -> contextlib.AbstractContextManager[Any]: ...

    def transaction(
        self, what: str, *, write: bool = False, raw: bool = False, one_statement: bool = False
    ) -> contextlib.AbstractContextManager[Any]:
        """One transaction, its errors translated into a :class:`StoreError` naming ``what``.

        Yields a SQLAlchemy :class:`~sqlalchemy.Connection`: a pooled reader (a consistent
        snapshot, no lock), or with ``write`` the writer, under :attr:`lock`. ``raw``: a write
        on the writer's DBAPI connection, yielding the driver's cursor, for statements
        SQLAlchemy compiled once for this database; ``one_statement``: the block runs a
        single statement, which is then its own transaction where the backend allows it
        (:attr:`Backend.statement_transactions
        <statemachine.log.dialect.Backend.statement_transactions>`: PostgreSQL commits it
        durably before the driver returns, with no ``BEGIN``/``COMMIT`` round trips).

        A failed write's :class:`StoreError` has the SQLAlchemy exception as its
        ``__cause__`` on both paths (an ``IntegrityError``, say), and a lost connection is
        invalidated as SQLAlchemy does, so reconnection is the same on both.
        """
        if raw:
            return self._raw(what, one_statement)
        return self._written(what) if write else self._read(what)

    @contextlib.contextmanager
    def _read(self, what: str) -> Iterator[Connection]:
        with translated(what, self.url), self.engine.connect() as conn, conn.begin():
            yield conn

    @contextlib.contextmanager
    def _written(self, what: str) -> Iterator[Connection]:
        with self.lock, translated(what, self.url):
            writer = self._writer_connection()
            with writer.begin():
                yield writer
            self._check_file()

    @contextlib.contextmanager
    def _raw(self, what: str, one_statement: bool) -> Iterator[Any]:
        with self.lock, translated(what, self.url):
            writer = self._writer_connection()
            backend = self.backend
            dbapi_error = self.engine.dialect.loaded_dbapi.Error
            dbapi = writer.connection.dbapi_connection
            if dbapi is None:  # pragma: no cover - a connection just checked out has one
                raise StoreError(f"no database connection to {describe(self.url)}")
            alone = one_statement and backend.statement_transactions
            cursor = None
            try:
                if alone:
                    backend.set_autocommit(dbapi, True)
                else:
                    backend.begin(dbapi)  # as writer.begin() does (SQLite: BEGIN IMMEDIATE)
                cursor = dbapi.cursor()
                yield cursor
                if not alone:
                    dbapi.commit()
            except BaseException as exc:
                if not alone:
                    with contextlib.suppress(Exception):
                        dbapi.rollback()
                if isinstance(exc, dbapi_error):
                    raise self._wrapped(exc, writer, cursor) from exc
                raise
            finally:
                if cursor is not None:
                    with contextlib.suppress(Exception):
                        cursor.close()
                if alone:
                    with contextlib.suppress(Exception):  # a lost connection was invalidated
                        backend.set_autocommit(dbapi, False)
            self._check_file()  # committed: was it into the file at the log's path?

    def _wrapped(self, exc: Any, conn: Connection, cursor: Any) -> DBAPIError:
        """A driver's error as SQLAlchemy wraps it (so :func:`translated` names it), ``conn``
        invalidated when the error says the connection is lost (as SQLAlchemy does)."""
        dialect = self.engine.dialect
        lost = bool(dialect.is_disconnect(exc, conn.connection.dbapi_connection, cursor))
        if lost:
            conn.invalidate(exc)
        wrapped: DBAPIError = DBAPIError.instance(
            None, None, exc, dialect.loaded_dbapi.Error, hide_parameters=True,
            connection_invalidated=lost, dialect=dialect,
        )  # fmt: skip
        return wrapped

    def _writer_connection(self) -> Connection:
        if not self.writable:
            raise StoreError(
                f"the event log at {describe(self.url)} was opened read-only (create=False); "
                "open it with EventStore.open(url) to write"
            )
        if self._writer is None or self._writer.closed:
            self._writer = self.engine.connect().execution_options(**{WRITER: True})
        return self._writer

    def _check_file(self) -> None:
        """Raise :class:`LogFileLostError` when the SQLite file is no longer at its path."""
        problem = self.watch.problem() if self.watch is not None else None
        if problem is None:
            return
        assert self.watch is not None
        writer = self._writer
        if writer is not None and writer.connection.dbapi_connection is not None:
            self.backend.settle_lost_file(writer.connection.dbapi_connection)
        raise self.watch.error(problem)

    def lock_for_share(self, query: Select[Any]) -> Select[Any]:
        """``query`` holding the experiment row against a new session's epoch ``UPDATE``."""
        return self.backend.lock_for_share(query)

    def pages(self, query: Select[Any], key: Any, what: str, page: int) -> Iterator[Any]:
        """The rows of ``query`` (ordered by ``key``, its first column, at most ``page`` rows
        a statement), read a page at a time after the last key seen, each page in its own
        read transaction (``what`` names it in errors): memory holds one page."""
        def fetch(after: Any) -> Sequence[Any]:
            with self.transaction(what) as conn:
                return conn.execute(query.where(key > after)).all()

        for rows in _keyset_pages(fetch, page):
            yield from rows

    def raw_pages(self, statement: Prepared, values: dict[str, Any], what: str,
                  page: int) -> Iterator[Sequence[Any]]:
        """What :meth:`pages` reads, for a statement compiled once (its rows ordered by its
        first column, bound ``after`` it, at most ``page`` a statement), run on a pooled
        reader's DBAPI cursor: the driver's rows as they come (no SQLAlchemy row each, no
        result processing: the caller does what its columns need), a page at a time, each
        in its own read transaction; errors translated as :meth:`transaction`'s."""
        def fetch(after: Any) -> Sequence[Any]:
            with self._read(what) as conn:
                cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
                try:
                    statement.run(cursor, {**values, "after": after})
                    rows: Sequence[Any] = cursor.fetchall()
                    return rows
                except self.engine.dialect.loaded_dbapi.Error as exc:
                    raise self._wrapped(exc, conn, cursor) from exc
                finally:
                    cursor.close()

        return _keyset_pages(fetch, page)

    def experiment_id(self, conn: Connection, name: str) -> int:
        """The id of experiment ``name``; :class:`UnknownExperimentError` with close names."""
        found = self._experiment_ids.get(name)
        if found is None:
            found = conn.execute(
                select(experiments.c.id).where(experiments.c.name == name)
            ).scalar()
            if found is None:
                names = conn.execute(select(experiments.c.name)).scalars()
                raise UnknownExperimentError(name, close_matches(name, names))
            self._experiment_ids[name] = found
        return found

    def forget_experiment(self, name: str) -> None:
        """Drop a cached id (the experiment was renamed)."""
        self._experiment_ids.pop(name, None)

    def remember_experiment(self, name: str, experiment_id: int) -> None:
        """Cache an experiment's id (it never changes once created)."""
        self._experiment_ids[name] = experiment_id

    def close(self) -> None:
        """Close the writer connection and release the pool."""
        with self.lock:
            if self._writer is not None:
                with contextlib.suppress(SQLAlchemyError):
                    self._writer.close()
                self._writer = None
            self.engine.dispose()


def _keyset_pages(fetch: Callable[[Any], Sequence[Any]], page: int) -> Iterator[Sequence[Any]]:
    """``fetch(after)``'s pages, each after the last first column seen (starting at 0), until
    one holds fewer than ``page`` rows: the keyset paging of :meth:`Connections.pages` and
    :meth:`Connections.raw_pages`."""
    after: Any = 0
    while True:
        rows = fetch(after)
        yield rows
        if len(rows) < page:
            return
        after = rows[-1][0]
