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

This module is the store's public face; each job is a module of its own: opening the database
(:mod:`.opening`), its connections and the one transaction helper (:mod:`.connections`),
driver sessions (:mod:`.session_sql`), experiments' rows (:mod:`.experiment_sql`), appends
(:mod:`.appends`), reads (:mod:`.queries`), snapshots (:mod:`.snapshot_sql`) and imports
(:mod:`.transfer`), with row mapping in :mod:`.mapper` and every difference between databases
in :mod:`.dialect`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from statemachine.domain.events import Event
from statemachine.domain.machine import TransitionRecord
from statemachine.domain.policy import RetryPolicy
from statemachine.domain.state import TrialState
from statemachine.log import migrate
from statemachine.log.appends import Appends
from statemachine.log.connections import Connections
from statemachine.log.dialect import DEFAULT_BUSY_TIMEOUT_MS, backend_for
from statemachine.log.engine import describe, to_url
from statemachine.log.experiment_sql import ExperimentTable
from statemachine.log.export_file import ExportFile
from statemachine.log.file_watch import FileWatch
from statemachine.log.opening import (
    check_readable,
    open_engine,
    refuse_foreign_target,
    remove_new_event_log,
    schema_revision,
    typed_open_errors,
)
from statemachine.log.queries import Queries
from statemachine.log.records import (
    AppendRequest,
    DriverSession,
    ExperimentInfo,
    FoldRow,
    SessionInfo,
    StoredEvent,
)
from statemachine.log.session_sql import SessionTable
from statemachine.log.snapshot import Share, SnapshotLoad
from statemachine.log.snapshot_sql import SnapshotTable
from statemachine.log.transfer import import_export

# The database-level reads and removals (opening.py) are reached from here too: the store is
# the log's public face (the CLI and ingest import them from this module).
__all__ = [
    "EventStore",
    "FoldRow",
    "refuse_foreign_target",
    "remove_new_event_log",
    "schema_revision",
]


class EventStore:
    """An event log in one database. Open with :meth:`open`; close with :meth:`close`."""

    def __init__(self, engine: Engine, url: str, *, writable: bool,
                 watch: FileWatch | None = None) -> None:
        """Use :meth:`open` instead (it checks and migrates the schema)."""
        self._db = Connections(engine, url, writable=writable, watch=watch)
        self._appends = Appends(self._db)
        self._queries = Queries(self._db)
        self._snapshots = SnapshotTable(self._db)
        self._sessions = SessionTable(self._db)
        self._experiments = ExperimentTable(self._db)

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
        engine = open_engine(
            url, create=create, sqlite_synchronous=sqlite_synchronous,
            busy_timeout_ms=busy_timeout_ms,
        )  # fmt: skip
        watch = None
        with typed_open_errors(engine, url):
            if create:
                migrate.upgrade(engine)
                path = backend_for(url).database_file(url)
                watch = FileWatch(path) if path is not None else None
            else:
                check_readable(engine, url)
        return cls(engine, url, writable=create, watch=watch)

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
        return self._sessions.start(experiment, policy, storage_path, kind)

    # ------------------------------------------------------------ moved experiments

    def find_experiment_with_trials(self, trial_ids: Collection[str], *,
                                    other_than: str) -> str | None:
        """The experiment (not ``other_than``) that holds every one of ``trial_ids``; the one
        with the newest driver session when several do; ``None`` when none does."""
        return self._experiments.find_with_trials(trial_ids, other_than=other_than)

    def experiment_storage_path(self, experiment: str) -> str | None:
        """The experiment's recorded storage path; ``None`` when unknown or not recorded."""
        return self._experiments.storage_path(experiment)

    def has_experiment(self, experiment: str) -> bool:
        """Whether the store has an experiment of that name."""
        return self._experiments.has(experiment)

    def experiment_renames(self, experiment: str) -> list[tuple[int, str, str | None]]:
        """The earlier names of a moved or renamed experiment, oldest first: ``(epoch of the
        session that renamed it, old name, old storage path)``, from its ``ExperimentRenamed``
        events."""
        return self._experiments.renames(experiment)

    def rename_experiment(self, old: str, new: str) -> None:
        """Give experiment ``old`` the name ``new`` (its folder was moved or renamed): its
        events, sessions and snapshots follow. Refused when ``new`` already exists."""
        return self._experiments.rename(old, new)

    def end_session(self, session: DriverSession, *, clean: bool = True) -> None:
        """Record the end of a session (``clean``: the driver shut down normally)."""
        self._sessions.end(session, clean)

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
        with self._db.transaction("importing an export", write=True) as conn:
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

    def read_event_rows(self, experiment: str) -> Iterator[Any]:
        """The rows of :meth:`read_experiment` as selected, without building records.

        Each item is a tuple in the order of :data:`~statemachine.log.mapper.EVENT_COLUMNS`
        (a ``recorded_at`` that does not read is :class:`~statemachine.log.records.Unreadable`);
        what :func:`~statemachine.log.verify` checks. Read in pages, as :meth:`read_experiment`.
        """
        return self._queries.read_event_rows(experiment)

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

    def has_trial(self, experiment: str, trial_id: str) -> bool:
        """Whether the experiment has an event of trial ``trial_id`` (one index lookup)."""
        return self._queries.has_trial(experiment, trial_id)

    def list_trials(self, experiment: str) -> list[str]:
        """The ids of the experiment's trials (those with at least one event), sorted."""
        return self._queries.list_trials(experiment)

    def experiment_names(self) -> list[str]:
        """The names of :meth:`list_experiments`, without counting their events."""
        return self._queries.experiment_names()

    def list_experiments(self) -> list[ExperimentInfo]:
        """Every experiment in the store, by name, with its number of trials and events."""
        return self._queries.list_experiments()

    # ------------------------------------------------------------ snapshots

    def save_snapshots(self, session: DriverSession, states: Iterable[TrialState],
                       shares: Mapping[str, Share] | None = None) -> int:
        """Store each state as its trial's snapshot (one transaction); returns how many.

        A snapshot replaces an older one of the same trial, never a newer one. A state folded
        past the trial's stored events is refused (a snapshot is only a cache of the log).
        ``shares``: each trial's share of the per-node tally at its state's seq (a trial
        missing there has had no attempt); ``None``: not known, for every trial.
        """
        return self._snapshots.save(session, states, shares)

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
