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
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import importlib.metadata
import os
import platform
import socket
import threading
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    Integer,
    Select,
    bindparam,
    func,
    insert,
    literal_column,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError, IntegrityError, SQLAlchemyError

from statemachine.domain.events import Event, TrialFailed, encode_event
from statemachine.domain.machine import TransitionRecord
from statemachine.domain.policy import RetryPolicy
from statemachine.domain.state import Counters, TrialState
from statemachine.exceptions import (
    ConcurrencyError,
    FencedError,
    NotAnEventLogError,
    StoreError,
    StoreNotFoundError,
    UnknownExperimentError,
    UnknownTrialError,
)
from statemachine.log import migrate
from statemachine.log.engine import (
    DEFAULT_BUSY_TIMEOUT_MS,
    WRITER,
    Prepared,
    describe,
    make_engine,
    sqlite_path,
    to_url,
    translated,
)
from statemachine.log.records import (
    AppendRequest,
    DriverSession,
    ExperimentInfo,
    SessionInfo,
    StoredEvent,
    check_storable,
    dump_json,
    load_json,
    storable_name,
    utc,
    utcnow,
)
from statemachine.log.schema import driver_sessions, events, experiments, snapshots
from statemachine.log.snapshot import decode_state, encode_state, machine_version

#: Columns of ``events`` in the order :func:`_stored` reads them.
_EVENT_COLUMNS = (
    events.c.position,
    events.c.trial_id,
    events.c.seq,
    events.c.type_name,
    events.c.version,
    events.c.payload,
    events.c.error_type,
    events.c.status_before,
    events.c.status_after,
    events.c.decision,
    events.c.counters,
    events.c.epoch,
    events.c.event_id,
    events.c.recorded_at,
)
_INSERTED = [c.name for c in _EVENT_COLUMNS if c.name != "position"] + ["experiment_id"]
_READ_PAGE = 5_000

#: Columns of ``events`` a bulk fold reads (:meth:`EventStore.read_fold_rows`).
_FOLD_COLUMNS = (*_EVENT_COLUMNS[:6], events.c.counters)
_FOLD_PAGE = 20_000
#: ``(position, trial_id, seq, type_name, version, payload, counters)``.
FoldRow = tuple[int, str, int, str, int, str, "str | None"]


def _stored(row: Any, experiment: str) -> StoredEvent:
    return StoredEvent(
        row[0], experiment, row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8],
        row[9], row[10], row[11], row[12], utc(row[13]),
    )  # fmt: skip


def _new_event_id() -> str:
    """A random 128-bit event id (hex), as unique as a uuid4."""
    return os.urandom(16).hex()


@functools.lru_cache(maxsize=4096)
def _counters_json(counters: Counters) -> str:
    return dump_json(counters._asdict())


def _chunks(items: list[str], size: int = 5_000) -> Iterator[list[str]]:
    """``items`` in slices small enough for an ``IN`` list (SQLite caps bound parameters)."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _suggest(name: str, candidates: Iterable[str]) -> list[str]:
    return difflib.get_close_matches(name, list(candidates), n=3, cutoff=0.5)


def _versions() -> dict[str, str]:
    from statemachine import __version__

    found = {"statemachine": __version__, "python": platform.python_version()}
    for package in ("ray", "sqlalchemy", "alembic"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


class EventStore:
    """An event log in one database. Open with :meth:`open`; close with :meth:`close`."""

    def __init__(self, engine: Engine, url: str, *, writable: bool) -> None:
        """Use :meth:`open` instead (it checks and migrates the schema)."""
        self._engine = engine
        self._url = url
        self._writable = writable
        self._lock = threading.RLock()
        self._writer: Connection | None = None
        self._experiment_ids: dict[str, int] = {}
        self._postgres = engine.dialect.name == "postgresql"
        self._append_one = Prepared(self._build_append_statement(), engine.dialect)
        self._insert_many = Prepared(
            insert(events).values(
                {name: bindparam(name, type_=events.c[name].type) for name in _INSERTED}
            ),
            engine.dialect,
        )

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
        level (``FULL`` by default: an acknowledged append survives a power loss).
        """
        url = to_url(url_or_path)
        path = sqlite_path(url)
        if path is not None:
            if not create and not path.is_file():
                raise StoreNotFoundError(
                    f"no event log at {path}: the file does not exist (check the path)"
                )
            if create:
                path.parent.mkdir(parents=True, exist_ok=True)
        engine = make_engine(
            url,
            writable=create,
            sqlite_synchronous=sqlite_synchronous,
            busy_timeout_ms=busy_timeout_ms,
        )
        try:
            if create:
                migrate.upgrade(engine)
            else:
                cls._check_readable(engine, url)
        except (SQLAlchemyError, StoreError) as exc:
            engine.dispose()
            typed = cls._open_error(exc, url)
            if typed is exc:
                raise
            raise typed from exc
        except BaseException:
            engine.dispose()
            raise
        return cls(engine, url, writable=create)

    @staticmethod
    def _open_error(exc: SQLAlchemyError | StoreError, url: str) -> StoreError:
        """The typed error for a failed open (raw or already translated driver errors)."""
        if isinstance(exc, StoreError) and type(exc) is not StoreError:
            return exc  # already precise: SchemaVersionError, NotAnEventLogError, ...
        cause = exc.__cause__ if isinstance(exc, StoreError) else exc
        original = cause.orig if isinstance(cause, DBAPIError) and cause.orig else cause
        message = (str(original).strip().splitlines() or [type(original).__name__])[0]
        if "does not exist" in message:
            return StoreNotFoundError(
                f"no event log at {describe(url)}: the database does not exist"
            )
        if "file is not a database" in message:  # SQLite, on any other file
            return NotAnEventLogError(
                f"{describe(url)} is not a statemachine event log ({message}); check the path "
                "or URL"
            )
        if isinstance(exc, StoreError):
            return exc
        return StoreError(f"cannot open the event log at {describe(url)}: {message}")

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
        return describe(self._url)

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self._engine.dialect.name

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (for tools and tests; the store's methods are the API)."""
        return self._engine

    def close(self) -> None:
        """Release the connections. The store cannot be used afterwards."""
        with self._lock:
            if self._writer is not None:
                with contextlib.suppress(SQLAlchemyError):
                    self._writer.close()
                self._writer = None
            self._engine.dispose()

    def __enter__(self) -> EventStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ connections

    @contextlib.contextmanager
    def _write(self) -> Iterator[Connection]:
        """One write transaction on the writer connection (caller holds ``self._lock``)."""
        if not self._writable:
            raise StoreError(
                f"the event log at {self.url} was opened read-only (create=False); "
                "open it with EventStore.open(url) to write"
            )
        if self._writer is None or self._writer.closed:
            self._writer = self._engine.connect().execution_options(**{WRITER: True})
        with self._writer.begin():
            yield self._writer

    @contextlib.contextmanager
    def _read(self) -> Iterator[Connection]:
        with self._engine.connect() as conn, conn.begin():
            yield conn

    def _lock_experiment(self, query: Select[Any]) -> Select[Any]:
        # PostgreSQL: hold the experiment row against a new session's epoch UPDATE until
        # commit. SQLite needs nothing: BEGIN IMMEDIATE already holds the database lock.
        return query.with_for_update(read=True) if self._postgres else query

    def _experiment_id(self, conn: Connection, name: str) -> int:
        found = self._experiment_ids.get(name)
        if found is None:
            found = conn.execute(
                select(experiments.c.id).where(experiments.c.name == name)
            ).scalar()
            if found is None:
                names = conn.execute(select(experiments.c.name)).scalars()
                raise UnknownExperimentError(name, _suggest(name, names))
            self._experiment_ids[name] = found
        return found

    # ------------------------------------------------------------ sessions

    def start_session(
        self, experiment: str, *, policy: RetryPolicy, storage_path: str | None = None
    ) -> DriverSession:
        """Start a driver session: create the experiment if new, take the next epoch.

        Every older session of the experiment is fenced out from this moment: its appends
        and snapshots fail with :class:`FencedError`.
        """
        check_storable(experiment, "experiment name")
        if storage_path is not None:
            storage_path = storable_name(storage_path)
        for attempt in range(3):
            try:
                with self._lock, translated("starting a driver session", self._url):
                    return self._start_session(experiment, policy, storage_path)
            except StoreError as exc:
                # Two drivers creating the same new experiment at once (PostgreSQL): the
                # loser's insert hits the unique name; the retry finds the row.
                if not isinstance(exc.__cause__, IntegrityError) or attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _start_session(
        self, experiment: str, policy: RetryPolicy, storage_path: str | None
    ) -> DriverSession:
        with self._write() as conn:
            row = conn.execute(
                select(experiments.c.id, experiments.c.epoch)
                .where(experiments.c.name == experiment)
                .with_for_update()
            ).first()
            now = utcnow()  # the epoch begins once the lock is held
            if row is None:
                experiment_id = conn.execute(
                    insert(experiments).returning(experiments.c.id),
                    {"name": experiment, "storage_path": storage_path, "created_at": now,
                     "epoch": 0},
                ).scalar_one()  # fmt: skip
                epoch = 1
            else:
                experiment_id, epoch = row[0], row[1] + 1
            values: dict[str, Any] = {"epoch": epoch}
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
                },
            )
        self._experiment_ids[experiment] = experiment_id
        return DriverSession(experiment, experiment_id, epoch, policy, now)

    def end_session(self, session: DriverSession, *, clean: bool = True) -> None:
        """Record the end of a session (``clean``: the driver shut down normally)."""
        with self._lock, translated("ending a driver session", self._url), self._write() as conn:
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
        with translated("listing driver sessions", self._url), self._read() as conn:
            experiment_id = self._experiment_id(conn, experiment)
            rows = conn.execute(
                select(driver_sessions)
                .where(driver_sessions.c.experiment_id == experiment_id)
                .order_by(driver_sessions.c.epoch)
            ).all()
        return [
            SessionInfo(
                experiment=experiment,
                epoch=r.epoch,
                host=r.host,
                pid=r.pid,
                versions=load_json(r.versions, f"versions of session {r.epoch}"),
                policy=RetryPolicy.from_dict(load_json(r.policy, f"policy of session {r.epoch}")),
                started_at=utc(r.started_at),
                ended_at=utc(r.ended_at) if r.ended_at else None,
                clean_end=r.clean_end,
            )
            for r in rows
        ]

    # ------------------------------------------------------------ appending

    def _build_append_statement(self) -> Any:
        """``INSERT INTO events SELECT <values> FROM experiments WHERE <fence and seq hold>``.

        One statement checks the epoch, the trial's last sequence number and inserts; it
        returns no row when a check fails (then :meth:`_diagnose` says which).
        """
        params = {name: bindparam(name, type_=events.c[name].type) for name in _INSERTED}
        expected = bindparam("expected_seq", type_=Integer())
        # coalesce outside the subquery: a bare max() is answered from the unique index
        # (SQLite's min/max optimisation) instead of scanning the trial's rows.
        last_seq = func.coalesce(
            select(func.max(events.c.seq))
            .where(
                events.c.experiment_id == params["experiment_id"],
                events.c.trial_id == params["trial_id"],
            )
            .scalar_subquery(),
            literal_column("0"),
        )
        source = self._lock_experiment(
            select(*(params[name] for name in _INSERTED)).where(
                experiments.c.id == params["experiment_id"],
                experiments.c.epoch == params["epoch"],
                last_seq == expected,
            )
        )
        statement = insert(events).from_select([events.c[name] for name in _INSERTED], source)
        # SQLite: the new rowid is the cursor's lastrowid (cheaper than a RETURNING result).
        return statement if not self._postgres else statement.returning(events.c.position)

    @staticmethod
    def _row(
        session: DriverSession, request: AppendRequest, event_id: str, recorded_at: datetime
    ) -> dict[str, Any]:
        type_name, version, payload = encode_event(request.event)
        record = request.record
        error = record.error if record is not None else None
        if error is None and isinstance(request.event, TrialFailed):
            error = request.event.error
        return {
            "experiment_id": session.experiment_id,
            "trial_id": check_storable(request.trial_id, "trial id"),
            "seq": request.expected_seq + 1,
            "type_name": type_name,
            "version": version,
            "payload": dump_json(payload),
            "error_type": error.kind if error is not None else None,
            "status_before": record.status_before.value if record else None,
            "status_after": record.status_after.value if record else None,
            "decision": record.decision.value if record and record.decision else None,
            "counters": _counters_json(record.counters) if record else None,
            "epoch": session.epoch,
            "event_id": check_storable(event_id, "event id", max_length=64),
            "recorded_at": recorded_at,
        }

    @staticmethod
    def _as_stored(row: dict[str, Any], position: int, experiment: str) -> StoredEvent:
        return StoredEvent(
            position, experiment, row["trial_id"], row["seq"], row["type_name"], row["version"],
            row["payload"], row["error_type"], row["status_before"], row["status_after"],
            row["decision"], row["counters"], row["epoch"], row["event_id"],
            row["recorded_at"],
        )  # fmt: skip

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
        request = AppendRequest(trial_id, event, expected_seq, record, event_id)
        row = self._row(session, request, event_id or _new_event_id(), utcnow())
        with self._lock, translated("appending an event", self._url):
            try:
                with self._write() as conn:
                    # Stamped under the write lock: times follow commit order, and an event
                    # of a fenced epoch is always stamped before the newer session began.
                    row["recorded_at"] = utcnow()
                    result = self._append_one.execute(conn, {**row, "expected_seq": expected_seq})
                    if self._postgres:
                        position = result.scalar()
                    else:
                        position = result.lastrowid if result.rowcount == 1 else None
                    if position is None:
                        return self._diagnose(conn, session, [row])[0]
                return self._as_stored(row, position, session.experiment)
            except IntegrityError:
                pass  # a concurrent writer won the race for this seq or event id
            with self._write() as conn:
                return self._diagnose(conn, session, [row])[0]

    def append_batch(
        self, session: DriverSession, requests: Sequence[AppendRequest]
    ) -> list[StoredEvent]:
        """Append many events in one transaction (group commit): all are stored, or none.

        Requests for the same trial must follow each other (``expected_seq`` 4, then 5, ...).
        Errors as :meth:`append`; a retried batch whose event ids are all stored returns them.
        """
        if not requests:
            return []
        now = utcnow()
        rows = [self._row(session, r, r.event_id or _new_event_id(), now) for r in requests]
        trials = [r.trial_id for r in requests]
        with self._lock, translated("appending a batch of events", self._url):
            try:
                with self._write() as conn:
                    epoch = conn.execute(
                        self._lock_experiment(
                            select(experiments.c.epoch).where(
                                experiments.c.id == session.experiment_id
                            )
                        )
                    ).scalar()
                    last = self._last_seqs(conn, session.experiment_id, trials)
                    if epoch != session.epoch or not self._chained(requests, last):
                        return self._diagnose(conn, session, rows)
                    now = utcnow()  # under the lock, as in append()
                    for row in rows:
                        row["recorded_at"] = now
                    # A plain executemany (RETURNING in parameter order would make SQLite
                    # insert row by row); the positions are read back by event id.
                    self._insert_many.execute_many(conn, rows)
                    positions: dict[str, int] = {}
                    for ids in _chunks([row["event_id"] for row in rows]):
                        positions.update(
                            conn.execute(
                                select(events.c.event_id, events.c.position).where(
                                    events.c.experiment_id == session.experiment_id,
                                    events.c.event_id.in_(ids),
                                )
                            ).all()
                        )
                return [
                    self._as_stored(row, positions[row["event_id"]], session.experiment)
                    for row in rows
                ]
            except IntegrityError:
                pass
            with self._write() as conn:
                return self._diagnose(conn, session, rows)

    @staticmethod
    def _last_seqs(conn: Connection, experiment_id: int, trials: Iterable[str]) -> dict[str, int]:
        """Each trial's last seq (trials without events are absent)."""
        last: dict[str, int] = {}
        for chunk in _chunks(sorted(set(trials))):
            last.update(
                conn.execute(
                    select(events.c.trial_id, func.max(events.c.seq))
                    .where(events.c.experiment_id == experiment_id, events.c.trial_id.in_(chunk))
                    .group_by(events.c.trial_id)
                ).all()
            )
        return last

    @staticmethod
    def _chained(requests: Sequence[AppendRequest], last: dict[str, int]) -> bool:
        """Each request's ``expected_seq`` is its trial's last seq, counting earlier requests."""
        running = dict(last)
        for request in requests:
            if request.expected_seq != running.get(request.trial_id, 0):
                return False
            running[request.trial_id] = request.expected_seq + 1
        return True

    def _diagnose(
        self, conn: Connection, session: DriverSession, rows: list[dict[str, Any]]
    ) -> list[StoredEvent]:
        """Why an append stored nothing: an idempotent retry (return it), fenced, or a conflict."""
        found = {
            r.event_id: r
            for ids in _chunks([row["event_id"] for row in rows])
            for r in conn.execute(
                select(*_EVENT_COLUMNS).where(
                    events.c.experiment_id == session.experiment_id, events.c.event_id.in_(ids)
                )
            )
        }
        same = [
            found.get(row["event_id"]) is not None
            and tuple(found[row["event_id"]][1:6])
            == (row["trial_id"], row["seq"], row["type_name"], row["version"], row["payload"])
            for row in rows
        ]
        if all(same):
            return [_stored(found[row["event_id"]], session.experiment) for row in rows]
        epoch = conn.execute(
            select(experiments.c.epoch).where(experiments.c.id == session.experiment_id)
        ).scalar_one()
        if epoch != session.epoch:
            raise FencedError(session.experiment, session.epoch, epoch)
        for row, ok in zip(rows, same, strict=True):
            other = found.get(row["event_id"])
            if other is not None and not ok:
                raise ConcurrencyError(
                    f"event id {row['event_id']!r} is already stored for a different event "
                    f"(trial {other.trial_id!r}, seq {other.seq}, {other.type_name}); "
                    "use a new event id",
                    row["trial_id"],
                    row["seq"] - 1,
                    other.seq,
                )
        last = self._last_seqs(conn, session.experiment_id, [row["trial_id"] for row in rows])
        running: dict[str, int] = {}
        for row in rows:
            trial = row["trial_id"]
            actual = running.get(trial, last.get(trial, 0))
            if row["seq"] - 1 != actual:
                raise ConcurrencyError(
                    f"trial {trial!r}: the append expected seq {row['seq'] - 1} to be the "
                    f"trial's last, but the log's last is {actual}; read the trial again "
                    "and fold from there",
                    trial,
                    row["seq"] - 1,
                    actual,
                )
            running[trial] = row["seq"]
        raise ConcurrencyError(
            "a concurrent append took the same sequence number; read the trial again",
            rows[0]["trial_id"],
            rows[0]["seq"] - 1,
            rows[0]["seq"],
        )

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
        with translated("reading a trial", self._url), self._read() as conn:
            experiment_id = self._experiment_id(conn, experiment)
            query = select(*_EVENT_COLUMNS).where(
                events.c.experiment_id == experiment_id, events.c.trial_id == trial_id
            )
            if upto_seq is not None:
                query = query.where(events.c.seq <= upto_seq)
            if upto_time is not None:
                query = query.where(events.c.recorded_at <= utc(upto_time))
            rows = conn.execute(query.order_by(events.c.seq)).all()
            if not rows and not self._has_trial(conn, experiment_id, trial_id):
                trials = self._trial_ids(conn, experiment_id)
                raise UnknownTrialError(experiment, trial_id, _suggest(trial_id, trials))
        return [_stored(row, experiment) for row in rows]

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
        with translated("reading an experiment", self._url), self._read() as conn:
            experiment_id = self._experiment_id(conn, experiment)
        remaining = limit
        after = from_position
        while remaining is None or remaining > 0:
            page = _READ_PAGE if remaining is None else min(_READ_PAGE, remaining)
            query = (
                select(*_EVENT_COLUMNS)
                .where(events.c.experiment_id == experiment_id, events.c.position > after)
                .order_by(events.c.position)
                .limit(page)
            )
            if upto_time is not None:
                query = query.where(events.c.recorded_at <= utc(upto_time))
            with translated("reading an experiment", self._url), self._read() as conn:
                rows = conn.execute(query).all()
            for row in rows:
                yield _stored(row, experiment)
            if len(rows) < page:
                return
            after = rows[-1][0]
            if remaining is not None:
                remaining -= len(rows)

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
        with translated("reading an experiment", self._url), self._read() as conn:
            experiment_id = self._experiment_id(conn, experiment)
        query = select(*_FOLD_COLUMNS).where(events.c.experiment_id == experiment_id)
        if upto_position is not None:
            query = query.where(events.c.position <= upto_position)
        if upto_time is not None:
            query = query.where(events.c.recorded_at <= utc(upto_time))
        query = query.order_by(events.c.position).limit(_FOLD_PAGE)
        after = 0
        while True:
            with translated("reading an experiment", self._url), self._read() as conn:
                rows = conn.execute(query.where(events.c.position > after)).all()
            yield from rows  # type: ignore[misc]
            if len(rows) < _FOLD_PAGE:
                return
            after = rows[-1][0]

    def _has_trial(self, conn: Connection, experiment_id: int, trial_id: str) -> bool:
        return (
            conn.execute(
                select(events.c.seq)
                .where(events.c.experiment_id == experiment_id, events.c.trial_id == trial_id)
                .limit(1)
            ).first()
            is not None
        )

    @staticmethod
    def _trial_ids(conn: Connection, experiment_id: int) -> list[str]:
        return list(
            conn.execute(
                select(events.c.trial_id)
                .where(events.c.experiment_id == experiment_id)
                .group_by(events.c.trial_id)
                .order_by(events.c.trial_id)
            ).scalars()
        )

    def list_trials(self, experiment: str) -> list[str]:
        """The ids of the experiment's trials (those with at least one event), sorted."""
        with translated("listing trials", self._url), self._read() as conn:
            return self._trial_ids(conn, self._experiment_id(conn, experiment))

    def list_experiments(self) -> list[ExperimentInfo]:
        """Every experiment in the store, by name, with its number of trials and events."""
        counts = (
            select(
                events.c.experiment_id,
                func.count(func.distinct(events.c.trial_id)).label("trials"),
                func.count().label("events"),
                func.max(events.c.recorded_at).label("last"),
            )
            .group_by(events.c.experiment_id)
            .subquery()
        )
        query = (
            select(experiments, counts.c.trials, counts.c.events, counts.c.last)
            .outerjoin(counts, counts.c.experiment_id == experiments.c.id)
            .order_by(experiments.c.name)
        )
        with translated("listing experiments", self._url), self._read() as conn:
            rows = conn.execute(query).all()
        return [
            ExperimentInfo(
                name=r.name,
                storage_path=r.storage_path,
                created_at=utc(r.created_at),
                epoch=r.epoch,
                trials=r.trials or 0,
                events=r.events or 0,
                last_recorded_at=utc(r.last) if r.last else None,
            )
            for r in rows
        ]

    # ------------------------------------------------------------ snapshots

    def save_snapshots(self, session: DriverSession, states: Iterable[TrialState]) -> int:
        """Store each state as its trial's snapshot (one transaction); returns how many.

        A snapshot replaces an older one of the same trial, never a newer one. A state folded
        past the trial's stored events is refused (a snapshot is only a cache of the log).
        """
        states = [s for s in states if s.seq > 0]
        if not states:
            return 0
        now = utcnow()
        tag = machine_version()
        rows = [
            {
                "experiment_id": session.experiment_id,
                "trial_id": s.trial_id,
                "seq": s.seq,
                "state": encode_state(s),
                "machine_version": tag,
                "epoch": session.epoch,
                "taken_at": now,
            }
            for s in states
        ]
        dialect_insert = postgresql.insert if self._postgres else sqlite.insert
        upsert = dialect_insert(snapshots)
        upsert = upsert.on_conflict_do_update(
            index_elements=[snapshots.c.experiment_id, snapshots.c.trial_id],
            set_={
                name: upsert.excluded[name]
                for name in ("seq", "state", "machine_version", "epoch", "taken_at")
            },
            where=snapshots.c.seq <= upsert.excluded.seq,
        )
        with self._lock, translated("saving snapshots", self._url), self._write() as conn:
            epoch = conn.execute(
                self._lock_experiment(
                    select(experiments.c.epoch).where(experiments.c.id == session.experiment_id)
                )
            ).scalar_one()
            if epoch != session.epoch:
                raise FencedError(session.experiment, session.epoch, epoch)
            last = self._last_seqs(conn, session.experiment_id, [s.trial_id for s in states])
            for s in states:
                if s.seq > last.get(s.trial_id, 0):
                    raise StoreError(
                        f"snapshot of trial {s.trial_id!r} at seq {s.seq} is ahead of its "
                        f"stored events (last seq {last.get(s.trial_id, 0)}); not saved"
                    )
            conn.execute(upsert, rows)
        return len(rows)

    def load_snapshots(self, experiment: str) -> dict[str, TrialState]:
        """The newest usable snapshot of each trial (written by this same state machine)."""
        with translated("loading snapshots", self._url), self._read() as conn:
            experiment_id = self._experiment_id(conn, experiment)
            rows = conn.execute(
                select(snapshots.c.trial_id, snapshots.c.state).where(
                    snapshots.c.experiment_id == experiment_id,
                    snapshots.c.machine_version == machine_version(),
                )
            ).all()
        return {trial_id: decode_state(text, trial_id) for trial_id, text in rows}

    def read_tails(self, experiment: str) -> Iterator[StoredEvent]:
        """Events after each trial's usable snapshot (all events of trials without one).

        Ordered by trial, then seq: what :meth:`load_snapshots` needs to rehydrate. Only the
        rows after a snapshot are fetched: each trial's last seq is read from the
        ``(experiment, trial, seq)`` index alone and compared with its snapshot, and only the
        trials behind get an index seek for their tail.
        """
        tag = machine_version()
        with translated("reading events after snapshots", self._url), self._read() as conn:
            experiment_id = self._experiment_id(conn, experiment)
            # Each trial's last seq, read from the (experiment, trial, seq) index alone (an
            # aggregate: the database computes it before joining anything to it) ...
            last = (
                select(events.c.trial_id, func.max(events.c.seq).label("last_seq"))
                .where(events.c.experiment_id == experiment_id)
                .group_by(events.c.trial_id)
                .subquery("last")
            )
            # ... against its usable snapshot: only trials with events past it have a tail.
            after = func.coalesce(snapshots.c.seq, 0)
            behind = (
                select(last.c.trial_id, after.label("after_seq"))
                .select_from(
                    last.outerjoin(
                        snapshots,
                        (snapshots.c.experiment_id == experiment_id)
                        & (snapshots.c.trial_id == last.c.trial_id)
                        & (snapshots.c.machine_version == tag),
                    )
                )
                .where(last.c.last_seq > after)
                .subquery("behind")
            )
            rows = conn.execute(
                select(*_EVENT_COLUMNS)
                .select_from(
                    behind.join(
                        events,
                        (events.c.experiment_id == experiment_id)
                        & (events.c.trial_id == behind.c.trial_id)
                        & (events.c.seq > behind.c.after_seq),
                    )
                )
                .order_by(events.c.trial_id, events.c.seq)
            ).all()
        return (_stored(row, experiment) for row in rows)
