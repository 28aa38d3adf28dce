"""The event store: an append-only, fenced, per-trial-sequenced log in SQL (SQLAlchemy Core).

Guarantees, on SQLite and PostgreSQL alike:
- an append (one event, or a batch) is one transaction: all of it is stored, or none;
- the per-trial sequence numbers of a trial are 1, 2, 3, ... with no gap: an append says which
  sequence number it expects to be the trial's last (optimistic concurrency);
- an append retried with the same event id returns the stored event instead of a duplicate;
- a driver session takes the next epoch of its experiment; appends of an older session fail
  with :class:`FencedError`, checked in the same transaction as the insert (SQLite: under the
  write lock taken by ``BEGIN IMMEDIATE``; PostgreSQL: ``FOR SHARE`` on the experiment row,
  which a new session's ``UPDATE`` of the epoch waits for);
- every driver/SQL error leaves as a :class:`StoreError` (or one of its subclasses).

One long-lived writer connection serves all writes (behind a lock, so threads may share a
store); reads use pooled connections and never block the writer.

This module opens the store (typed errors), owns its connections and driver sessions, and
is the public face of the rest: appends (:mod:`.appends`), reads (:mod:`.queries`),
snapshots (:mod:`.snapshot_sql`) and imports (:mod:`.transfer`), with row mapping in
:mod:`.mapper` and every difference between databases in :mod:`.dialect`.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import platform
import socket
import threading
from collections.abc import Collection, Iterable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, Select, func, insert, inspect, select, update
from sqlalchemy.exc import DBAPIError, IntegrityError, SQLAlchemyError

from statemachine.domain.events import Event
from statemachine.domain.machine import TransitionRecord
from statemachine.domain.policy import RetryPolicy
from statemachine.domain.state import TrialState
from statemachine.exceptions import (
    ConfigurationError,
    ExperimentExistsError,
    NotAnEventLogError,
    StoreError,
    StoreNotFoundError,
    UnknownExperimentError,
    close_matches,
)
from statemachine.log import migrate
from statemachine.log.appends import Appends
from statemachine.log.dialect import DEFAULT_BUSY_TIMEOUT_MS, WRITER, backend_for, backend_of
from statemachine.log.engine import describe, make_engine, to_url, translated
from statemachine.log.file_watch import FileWatch
from statemachine.log.mapper import FoldRow
from statemachine.log.queries import Queries, chunks
from statemachine.log.records import (
    SESSION_KINDS,
    AppendRequest,
    DriverSession,
    ExperimentInfo,
    SessionInfo,
    StoredEvent,
    check_storable,
    dump_json,
    new_log_id,
    storable_name,
    utcnow,
)
from statemachine.log.schema import driver_sessions, events, experiments
from statemachine.log.snapshot_sql import SnapshotLoad, SnapshotTable
from statemachine.log.transfer import ExportFile, import_export

__all__ = ["Connections", "EventStore", "FoldRow", "schema_revision"]


def _versions() -> dict[str, str]:
    from statemachine import __version__

    found = {"statemachine": __version__, "python": platform.python_version()}
    for package in ("ray", "sqlalchemy", "alembic"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


class Connections:
    """One store's engine: its one writer connection (behind :attr:`lock`) and pooled readers.

    Shared by the store's parts (appends, queries, snapshots); they run their SQL through
    :meth:`write` and :meth:`read` and ask :attr:`backend` whatever the database does its
    own way.
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
        #: Held around every write transaction (threads may share a store).
        self.lock = threading.RLock()
        self._writer: Connection | None = None
        self._experiment_ids: dict[str, int] = {}

    @contextlib.contextmanager
    def write(self) -> Iterator[Connection]:
        """One write transaction on the writer connection (the caller holds :attr:`lock`)."""
        writer = self._writer_connection()
        with writer.begin():
            yield writer
        self._check_file()

    def _writer_connection(self) -> Connection:
        if not self.writable:
            raise StoreError(
                f"the event log at {describe(self.url)} was opened read-only (create=False); "
                "open it with EventStore.open(url) to write"
            )
        if self._writer is None or self._writer.closed:
            self._writer = self.engine.connect().execution_options(**{WRITER: True})
        return self._writer

    @contextlib.contextmanager
    def raw_write(self, *, one_statement: bool = False) -> Iterator[Any]:
        """One write transaction run on the writer's DBAPI connection: the hot path.

        Yields the driver's cursor, for statements SQLAlchemy compiled once for this
        database (:class:`~statemachine.log.engine.Prepared`); the caller holds :attr:`lock`.
        The transaction begins as :meth:`write`'s does (SQLite: ``BEGIN IMMEDIATE``), commits
        when the block ends and rolls back on any error. A driver error leaves as the
        SQLAlchemy exception :meth:`write` would raise (``IntegrityError``, ``DataError``,
        ...), and a lost connection is invalidated as SQLAlchemy does, so error translation
        and reconnection are the same on both paths.

        ``one_statement``: the block runs a single statement, which is then its own
        transaction where the backend allows it (:attr:`Backend.statement_transactions
        <statemachine.log.dialect.Backend.statement_transactions>`: PostgreSQL commits it
        durably before the driver returns, with no ``BEGIN``/``COMMIT`` round trips).
        """
        writer = self._writer_connection()
        dialect = self.engine.dialect
        backend = self.backend
        dbapi_error = dialect.loaded_dbapi.Error
        dbapi = writer.connection.dbapi_connection
        if dbapi is None:  # pragma: no cover - a connection just checked out always has one
            raise StoreError(f"no database connection to {describe(self.url)}")
        alone = one_statement and backend.statement_transactions
        cursor = None
        try:
            if alone:
                backend.set_autocommit(dbapi, True)
            else:
                backend.begin(dbapi)
            cursor = dbapi.cursor()
            yield cursor
            if not alone:
                dbapi.commit()
        except BaseException as exc:
            if not alone:
                with contextlib.suppress(Exception):
                    dbapi.rollback()
            if isinstance(exc, dbapi_error):
                lost = bool(dialect.is_disconnect(exc, dbapi, cursor))
                if lost:
                    writer.invalidate(exc)
                raise DBAPIError.instance(
                    None, None, exc, dbapi_error, hide_parameters=True,
                    connection_invalidated=lost, dialect=dialect,
                ) from exc  # fmt: skip
            raise
        finally:
            if cursor is not None:
                with contextlib.suppress(Exception):
                    cursor.close()
            if alone:
                with contextlib.suppress(Exception):  # a lost connection was invalidated
                    backend.set_autocommit(dbapi, False)
        self._check_file()  # committed: was it into the file at the log's path?

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

    @contextlib.contextmanager
    def read(self) -> Iterator[Connection]:
        """One read transaction on a pooled connection (a consistent snapshot, no lock)."""
        with self.engine.connect() as conn, conn.begin():
            yield conn

    def lock_for_share(self, query: Select[Any]) -> Select[Any]:
        """``query`` holding the experiment row against a new session's epoch ``UPDATE``."""
        return self.backend.lock_for_share(query)

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


def _engine(
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
def _typed_open_errors(engine: Engine, url: str) -> Iterator[None]:
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
    engine = _engine(url, create=False)
    with _typed_open_errors(engine, url), engine.connect() as conn:
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
    engine = _engine(url, create=False)
    with _typed_open_errors(engine, url), engine.connect() as conn:
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
    engine = _engine(url, create=False)
    try:
        with _typed_open_errors(engine, url):
            return migrate.remove(engine, experiment)
    finally:
        engine.dispose()


class EventStore:
    """An event log in one database. Open with :meth:`open`; close with :meth:`close`."""

    def __init__(self, engine: Engine, url: str, *, writable: bool,
                 watch: FileWatch | None = None) -> None:
        """Use :meth:`open` instead (it checks and migrates the schema)."""
        self._db = Connections(engine, url, writable=writable, watch=watch)
        self._appends = Appends(self._db)
        self._queries = Queries(self._db)
        self._snapshots = SnapshotTable(self._db)

    # ------------------------------------------------------------ opening and closing

    @classmethod
    def open(
        cls,
        url_or_path: str | Path,
        *,
        create: bool = True,
        sqlite_synchronous: str = "FULL",
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
    ) -> EventStore:
        """Open the event log at a URL or SQLite file path.

        ``create=True`` (a driver): creates the database file if needed and applies pending
        migrations. ``create=False`` (read paths such as the CLI): never creates or migrates;
        raises :class:`StoreNotFoundError`, :class:`NotAnEventLogError` or
        :class:`SchemaVersionError` instead. ``sqlite_synchronous`` is SQLite's ``synchronous``
        level (``FULL`` by default: an acknowledged append survives a power loss). A database
        other than SQLite or PostgreSQL, or a bad setting, raises
        :class:`~statemachine.exceptions.ConfigurationError`. A SQLite file opened for writing
        that is then deleted, renamed or replaced makes the next write raise
        :class:`~statemachine.exceptions.LogFileLostError` (after its commit, which went to
        the lost file: :mod:`statemachine.log.file_watch`).
        """
        url = to_url(url_or_path)
        engine = _engine(
            url, create=create, sqlite_synchronous=sqlite_synchronous,
            busy_timeout_ms=busy_timeout_ms,
        )  # fmt: skip
        watch = None
        with _typed_open_errors(engine, url):
            if create:
                migrate.upgrade(engine)
                path = backend_for(url).database_file(url)
                watch = FileWatch(path) if path is not None else None
            else:
                cls._check_readable(engine, url)
        return cls(engine, url, writable=create, watch=watch)

    @staticmethod
    def _check_readable(engine: Engine, url: str) -> None:
        with engine.connect() as conn:
            revision = migrate.current_revision(conn)
            if revision is None:
                raise NotAnEventLogError(
                    f"{describe(url)} is not a statemachine event log (it has no event log "
                    "schema); check the path or URL"
                )
            migrate.refuse_foreign(conn, revision, url)
        migrate.check_revision(revision, url, writable=False)

    @property
    def url(self) -> str:
        """The database URL (password hidden)."""
        return describe(self._db.url)

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self._db.backend.name

    @property
    def connections(self) -> Connections:
        """The store's connections (for its read model, :mod:`statemachine.log.read`)."""
        return self._db

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (for tools and tests; the store's methods are the API)."""
        return self._db.engine

    def close(self) -> None:
        """Release the connections. The store cannot be used afterwards."""
        self._db.close()

    def __enter__(self) -> EventStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ sessions

    def start_session(
        self, experiment: str, *, policy: RetryPolicy, storage_path: str | None = None,
        kind: str | None = None,
    ) -> DriverSession:
        """Start a driver session: create the experiment if new, take the next epoch.

        ``kind`` says how the driver began (:data:`SESSION_KINDS`: ``"fresh"`` for a
        ``Tuner.fit()``, ``"restore"`` for a ``Tuner.restore``; ``None``: not said), so a
        fresh run that reuses an experiment's name is not taken for a resume.

        Every older session of the experiment is fenced out from this moment: its appends
        and snapshots fail with :class:`FencedError`.
        """
        check_storable(experiment, "experiment name")
        if kind is not None and kind not in SESSION_KINDS:
            raise ConfigurationError(
                f"session kind must be one of {', '.join(SESSION_KINDS)} or None, got {kind!r}"
            )
        if storage_path is not None:
            storage_path = storable_name(storage_path)
        for attempt in range(3):
            try:
                with self._db.lock, translated("starting a driver session", self._db.url):
                    return self._start_session(experiment, policy, storage_path, kind)
            except StoreError as exc:
                # Two drivers creating the same new experiment at once (PostgreSQL): the
                # loser's insert hits the unique name; the retry finds the row.
                if not isinstance(exc.__cause__, IntegrityError) or attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _start_session(
        self, experiment: str, policy: RetryPolicy, storage_path: str | None, kind: str | None
    ) -> DriverSession:
        with self._db.write() as conn:
            row = conn.execute(
                select(experiments.c.id, experiments.c.epoch, experiments.c.log_id)
                .where(experiments.c.name == experiment)
                .with_for_update()
            ).first()
            now = utcnow()  # the epoch begins once the lock is held
            values: dict[str, Any] = {}
            if row is None:
                experiment_id = conn.execute(
                    insert(experiments).returning(experiments.c.id),
                    {"name": experiment, "storage_path": storage_path, "created_at": now,
                     "epoch": 0, "log_id": new_log_id()},
                ).scalar_one()  # fmt: skip
                epoch = 1
            else:
                experiment_id, epoch = row[0], row[1] + 1
                if row[2] is None:  # created before revision 0003: it gets its identity now
                    values["log_id"] = new_log_id()
            values["epoch"] = epoch
            if storage_path is not None:
                values["storage_path"] = storage_path
            conn.execute(update(experiments).where(experiments.c.id == experiment_id), values)
            conn.execute(
                insert(driver_sessions),
                {
                    "experiment_id": experiment_id,
                    "epoch": epoch,
                    "host": socket.gethostname()[:255],
                    "pid": os.getpid(),
                    "versions": dump_json(_versions()),
                    "policy": dump_json(policy.to_dict()),
                    "started_at": now,
                    "kind": kind,
                },
            )
        self._db.remember_experiment(experiment, experiment_id)
        return DriverSession(experiment, experiment_id, epoch, policy, now)

    # ------------------------------------------------------------ moved experiments

    def find_experiment_with_trials(self, trial_ids: Collection[str], *,
                                    other_than: str) -> str | None:
        """The experiment (not ``other_than``) that holds every one of ``trial_ids``; the one
        with the newest driver session when several do; ``None`` when none does."""
        wanted = sorted(set(trial_ids))
        if not wanted:
            return None
        found: dict[int, int] = {}
        db = self._db
        with translated("looking for a moved experiment", db.url), db.read() as conn:
            for part in chunks(wanted):
                rows = conn.execute(
                    select(events.c.experiment_id,
                           func.count(func.distinct(events.c.trial_id)))
                    .where(events.c.trial_id.in_(part))
                    .group_by(events.c.experiment_id)
                ).all()
                for experiment_id, count in rows:
                    found[experiment_id] = found.get(experiment_id, 0) + int(count)
            holding = [i for i, count in found.items() if count == len(wanted)]
            if not holding:
                return None
            rows = conn.execute(
                select(experiments.c.name)
                .where(experiments.c.id.in_(holding), experiments.c.name != other_than)
                .order_by(experiments.c.epoch.desc(), experiments.c.id.desc())
            ).scalars().all()
        return str(rows[0]) if rows else None

    def experiment_storage_path(self, experiment: str) -> str | None:
        """The experiment's recorded storage path; ``None`` when unknown or not recorded."""
        db = self._db
        with translated("reading an experiment", db.url), db.read() as conn:
            return conn.execute(select(experiments.c.storage_path)
                                .where(experiments.c.name == experiment)).scalar()

    def has_experiment(self, experiment: str) -> bool:
        """Whether the store has an experiment of that name."""
        db = self._db
        with translated("reading an experiment", db.url), db.read() as conn:
            return conn.execute(select(experiments.c.id)
                                .where(experiments.c.name == experiment)).scalar() is not None

    def experiment_renames(self, experiment: str) -> list[tuple[int, str, str | None]]:
        """The earlier names of a moved or renamed experiment, oldest first: ``(epoch of the
        session that renamed it, old name, old storage path)``, from its ``ExperimentRenamed``
        events."""
        db = self._db
        with translated("reading an experiment's renames", db.url), db.read() as conn:
            rows = conn.execute(
                select(events.c.epoch, events.c.payload)
                .where(events.c.experiment_id == db.experiment_id(conn, experiment),
                       events.c.type_name == "ExperimentRenamed")
                .order_by(events.c.position)
            ).all()
        found: dict[tuple[int, str, str | None], None] = {}
        for epoch, payload in rows:
            try:
                data = json.loads(payload)
                old, path = str(data["old_name"]), data.get("old_storage_path")
            except (ValueError, KeyError, TypeError):
                continue  # an undecodable row is reported by the reads that decode events
            found[(int(epoch), old, path if isinstance(path, str) else None)] = None
        return list(found)

    def rename_experiment(self, old: str, new: str) -> None:
        """Give experiment ``old`` the name ``new`` (its folder was moved or renamed): its
        events, sessions and snapshots follow. Refused when ``new`` already exists."""
        check_storable(new, "experiment name")
        with self._db.lock, translated("renaming an experiment", self._db.url), \
                self._db.write() as conn:
            taken = conn.execute(
                select(experiments.c.id).where(experiments.c.name == new)).scalar()
            if taken is not None:
                raise ExperimentExistsError(
                    f"cannot rename experiment {old!r} to {new!r}: the log already has an "
                    f"experiment {new!r}")
            experiment_id = self._db.experiment_id(conn, old)
            conn.execute(update(experiments).where(experiments.c.id == experiment_id),
                         {"name": new})
        self._db.forget_experiment(old)
        self._db.remember_experiment(new, experiment_id)

    def end_session(self, session: DriverSession, *, clean: bool = True) -> None:
        """Record the end of a session (``clean``: the driver shut down normally)."""
        with (
            self._db.lock,
            translated("ending a driver session", self._db.url),
            self._db.write() as conn,
        ):
            conn.execute(
                update(driver_sessions)
                .where(
                    driver_sessions.c.experiment_id == session.experiment_id,
                    driver_sessions.c.epoch == session.epoch,
                    driver_sessions.c.ended_at.is_(None),
                )
                .values(ended_at=utcnow(), clean_end=clean)
            )

    def list_sessions(self, experiment: str) -> list[SessionInfo]:
        """Every driver session of the experiment, oldest first."""
        return self._queries.list_sessions(experiment)

    # ------------------------------------------------------------ appending

    def append(
        self,
        session: DriverSession,
        trial_id: str,
        event: Event,
        *,
        expected_seq: int,
        record: TransitionRecord | None = None,
        event_id: str | None = None,
    ) -> StoredEvent:
        """Append one event as the trial's ``expected_seq + 1``-th, durably.

        ``record`` (what the fold did) is stored beside the event for explanation and
        verification. Raises :class:`FencedError` (a newer session took the experiment) or
        :class:`ConcurrencyError` (``expected_seq`` is not the trial's last). A retry with the
        same ``event_id`` returns the already stored event.
        """
        return self._appends.append(
            session, AppendRequest(trial_id, event, expected_seq, record, event_id)
        )

    def append_batch(
        self,
        session: DriverSession,
        requests: Sequence[AppendRequest],
        *,
        returning: bool = True,
        recorded_at: Sequence[datetime] | None = None,
    ) -> list[StoredEvent]:
        """Append many events in one transaction (group commit): all are stored, or none.

        Requests for the same trial must follow each other (``expected_seq`` 4, then 5, ...).
        Errors as :meth:`append`; a retried batch whose event ids are all stored returns them.
        ``returning=False`` stores the same but builds no stored records for a new batch
        (returns ``[]``): the live log's group commit, which needs none. ``recorded_at``
        gives each event its own time, for a history reconstructed from another source
        (``trial-replay ingest``: Ray's times); by default every event gets the commit's.
        """
        return self._appends.append_batch(session, requests, returning=returning,
                                          recorded_at=recorded_at)

    def import_experiment(
        self, export: ExportFile, *, name: str | None = None, force: bool = False
    ) -> str:
        """Copy an exported experiment into this store, in one transaction; return its name.

        ``export`` is :func:`~statemachine.log.read_export`'s check of the file; the rows are
        streamed from the file and copied verbatim (times, epochs, event ids, recorded
        decisions) under ``name`` (default: the exported name), with a snapshot of every
        trial's fold. An experiment of that name already in the store is refused with
        :class:`~statemachine.exceptions.ExperimentExistsError`, an export whose replay
        diverges with :class:`~statemachine.exceptions.ExportDivergedError` (unless
        ``force``); either way nothing is written.
        """
        with self._db.lock, translated("importing an export", self._db.url):
            with self._db.write() as conn:
                return import_export(conn, export, name, where=self.url, force=force)

    # ------------------------------------------------------------ reading

    def read_trial(
        self,
        experiment: str,
        trial_id: str,
        *,
        upto_seq: int | None = None,
        upto_time: datetime | None = None,
    ) -> list[StoredEvent]:
        """A trial's events in sequence order, up to and including ``upto_seq``/``upto_time``.

        Raises :class:`UnknownTrialError` when the experiment has no event for the trial.
        """
        return self._queries.read_trial(
            experiment, trial_id, upto_seq=upto_seq, upto_time=upto_time
        )

    def read_experiment(
        self,
        experiment: str,
        *,
        from_position: int = 0,
        limit: int | None = None,
        upto_time: datetime | None = None,
    ) -> Iterator[StoredEvent]:
        """The experiment's events with ``position > from_position``, in position order.

        Read in pages; positions only grow, so ``from_position=<last position seen>``
        continues a read. ``upto_time`` stops at events recorded after it.
        """
        return self._queries.read_experiment(
            experiment, from_position=from_position, limit=limit, upto_time=upto_time
        )

    def read_fold_rows(
        self,
        experiment: str,
        *,
        upto_position: int | None = None,
        upto_time: datetime | None = None,
    ) -> Iterator[FoldRow]:
        """The columns a bulk fold needs, of every event, in position order (lean tuples).

        Each item is ``(position, trial_id, seq, type_name, version, payload, counters)``
        with ``payload``/``counters`` as stored JSON text: no :class:`StoredEvent`, no
        timestamp parsing. ``upto_position``/``upto_time`` stop at events after them. Read in
        pages, as :meth:`read_experiment`.
        """
        return self._queries.read_fold_rows(
            experiment, upto_position=upto_position, upto_time=upto_time
        )

    def list_trials(self, experiment: str) -> list[str]:
        """The ids of the experiment's trials (those with at least one event), sorted."""
        return self._queries.list_trials(experiment)

    def list_experiments(self) -> list[ExperimentInfo]:
        """Every experiment in the store, by name, with its number of trials and events."""
        return self._queries.list_experiments()

    # ------------------------------------------------------------ snapshots

    def save_snapshots(self, session: DriverSession, states: Iterable[TrialState]) -> int:
        """Store each state as its trial's snapshot (one transaction); returns how many.

        A snapshot replaces an older one of the same trial, never a newer one. A state folded
        past the trial's stored events is refused (a snapshot is only a cache of the log).
        """
        return self._snapshots.save(session, states)

    def load_snapshots(self, experiment: str) -> dict[str, TrialState]:
        """The newest usable snapshot of each trial (written by this same state machine).

        A snapshot that does not decode is left out (with one warning for all of them).
        """
        return self._snapshots.load(experiment).states

    def load_snapshot_set(self, experiment: str) -> SnapshotLoad:
        """:meth:`load_snapshots`, and the trials whose snapshot could not be decoded.

        Those trials are folded from their events: pass them to :meth:`read_tails`.
        """
        return self._snapshots.load(experiment)

    def read_tails(
        self, experiment: str, *, refold: Collection[str] = ()
    ) -> Iterator[StoredEvent]:
        """Events after each trial's usable snapshot (all events of trials without one).

        Ordered by trial, then seq: what :meth:`load_snapshots` needs to rehydrate. Only the
        rows after a snapshot are fetched: each trial's last seq is read from the
        ``(experiment, trial, seq)`` index alone and compared with its snapshot, and only the
        trials behind get an index seek for their tail. Trials in ``refold`` (a snapshot that
        could not be decoded) get all their events.
        """
        return self._snapshots.read_tails(experiment, refold=refold)
