"""Verify: fold a log again and compare every row with what it recorded.

:func:`verify` folds through the table compiled from the ``transitions`` machine
(:mod:`statemachine.domain.compiled`, which a property test holds equal to the machine, record
for record and error for error); ``machine=True`` (``trial-replay verify --machine``) triggers
the machine itself, the definition, at about ten times the cost: the same checks, the same
findings. :class:`Verifier` takes one row at a time, from a store (:func:`verify`, through the
:class:`~statemachine.log.history.VerifiableHistory` it reads, as lean rows when the store
hands them out) or from an export file being imported
(:func:`~statemachine.log.export_file.read_export`, before anything is written).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from statemachine.domain.compiled import apply_compiled
from statemachine.domain.events import Event, TrialFailed, decode_event
from statemachine.domain.machine import TransitionRecord, apply
from statemachine.domain.state import Counters, TrialState
from statemachine.exceptions import EventDecodeError, InvalidTransitionError, StateMachineError
from statemachine.log.bulk import collector_paused
from statemachine.log.history import RowHistory, VerifiableHistory
from statemachine.log.mapper import stored_event
from statemachine.log.records import INGEST_KIND, StoredEvent, utc


@dataclass(frozen=True, slots=True)
class Divergence:
    """Where the fold first disagreed with what the log recorded.

    ``field`` is one of ``status_before``, ``status_after``, ``decision``, ``counters``,
    ``error_type`` (recorded vs replayed), ``transition`` (the event is not valid where the
    fold is), ``event`` (the row does not decode), ``epoch`` (no such driver session, or
    older than an earlier row's), ``recorded_at`` (time going back, or a stored time that is
    unreadable: ``recorded`` says what is wrong) or ``snapshot`` (a snapshot differs from
    the fold, or is ahead of the trial's last event).
    """

    position: int
    trial_id: str
    seq: int
    field: str
    recorded: Any
    replayed: Any

    def describe(self) -> str:
        """One line for people."""
        if self.field == "recorded_at" and self.replayed is None:  # unreadable: says why
            where = f"position {self.position}, trial {self.trial_id!r}, seq {self.seq}"
            return f"{where}: {self.recorded}"
        return (
            f"position {self.position}, trial {self.trial_id!r}, seq {self.seq}: "
            f"{self.field} recorded {self.recorded!r}, replay gives {self.replayed!r}"
        )


@dataclass(frozen=True, slots=True)
class SeqGap:
    """Sequence numbers missing from a trial: after ``after_seq`` came ``next_seq``."""

    trial_id: str
    after_seq: int
    next_seq: int


@dataclass(frozen=True, slots=True)
class VerifyResult:
    """The outcome of :func:`verify`; ``ok`` when the fold reproduces the whole log."""

    experiment: str
    trials: int
    events: int
    snapshots_checked: int
    divergence: Divergence | None
    gaps: tuple[SeqGap, ...]

    @property
    def ok(self) -> bool:
        """No divergence and no gap."""
        return self.divergence is None and not self.gaps


#: How far back a driver's wall clock may step (NTP) before verify calls it out of order.
CLOCK_TOLERANCE = timedelta(seconds=5)


@dataclass(frozen=True, slots=True)
class SessionSpan:
    """What :class:`Verifier` needs of a driver session: its epoch, when it started, and how
    (``kind``: an ``ingest`` session's events carry the times of the history it rebuilt,
    earlier than the session itself)."""

    epoch: int
    started_at: datetime
    kind: str | None = None


#: How many decoded payloads (and matching counters) a :class:`Verifier` keeps to reuse:
#: rows often repeat one (``TrialStarted`` on the same node, a policy); emptied when full.
_CACHED = 4096


class Verifier:
    """The checks of :func:`verify`, fed one stored row at a time (in position order).

    Shared by :func:`verify` (rows from the store) and ``import`` (rows from the export file,
    checked before anything is written). Memory holds one state per trial, never the rows.
    ``sessions`` (``None``: not known) enables the epoch and start-time checks. ``machine``:
    fold through the ``transitions`` machine itself instead of the table compiled from it.
    """

    def __init__(
        self,
        experiment: str,
        *,
        snapshots: dict[str, TrialState] | None = None,
        sessions: Iterable[SessionSpan] | None = None,
        machine: bool = False,
    ) -> None:
        self.experiment = experiment
        self.snapshots = snapshots or {}
        self.sessions = {s.epoch: s for s in sessions} if sessions is not None else None
        #: Every trial's state after its rows so far (a diverged trial stops being folded).
        self.states: dict[str, TrialState] = {}
        self.broken: set[str] = set()
        self.divergence: Divergence | None = None
        self.gaps: list[SeqGap] = []
        self.count = self.checked = 0
        self._apply = apply if machine else apply_compiled
        self._last_seq: dict[str, int] = {}
        self._last_position: dict[str, int] = {}
        self._last_epoch = 0
        self._last_time: dict[int, datetime] = {}
        self._time_read: Any = None  # the last row's time as read, and as compared
        self._time = datetime.min
        #: ``(type, version, payload text) -> event``: decoded events are immutable values.
        self._events: dict[tuple[Any, Any, Any], Event] = {}
        #: ``counters text -> the counters`` it was found to parse to and match (a text
        #: parses to one value: it matches those counters and no others).
        self._matching: dict[str, Counters] = {}
        #: The epoch and time of the row checked last, when they passed their checks.
        self._placed_epoch: int | None = None
        self._placed_at = datetime.min

    def feed(self, item: StoredEvent) -> None:
        """Check one row."""
        self._check((
            item.position, item.trial_id, item.seq, item.type_name, item.version,
            item.payload_json, item.error_type, item.status_before, item.status_after,
            item.decision, item.counters_json, item.epoch,
        ), item.recorded_at, item.damage, item)  # fmt: skip

    def feed_row(self, row: Sequence[Any]) -> None:
        """Check one row selected as :data:`~statemachine.log.mapper.EVENT_COLUMNS`: what
        :meth:`feed` of its :class:`StoredEvent` checks, without building one (a row whose
        time does not read is fed as that record, which names the damage)."""
        recorded_at = row[13]
        if recorded_at is not self._time_read and recorded_at != self._time_read:
            # (rows of one batch share their time, often the very object: parsed once)
            if type(recorded_at) is not datetime:
                self.feed(stored_event(row, self.experiment))
                return
            self._time_read, self._time = recorded_at, utc(recorded_at)
        self._check(row, self._time, None, None)

    def _check(self, row: Sequence[Any], recorded_at: datetime, damage: str | None,
               item: StoredEvent | None) -> None:
        """The checks of one row: ``row`` in :data:`EVENT_COLUMNS` order (up to ``epoch``;
        all of them without ``item``), ``item`` its record when the caller has one (else
        built here, only to word an error).

        One body for the common path of a row without its record (:meth:`feed_row`: it
        decodes from the cache, folds, and matches what it recorded): what :meth:`_event`,
        :meth:`_recorded_vs`, :func:`_error_type_vs` and :meth:`_row_found` check, in the same
        order, with the same findings. A row fed with its record (:meth:`feed`) takes those
        methods, every check run: the reference the property test holds the common path to.
        """
        position, trial_id, seq = row[0], row[1], row[2]
        self.count += 1
        last_seq = self._last_seq
        previous = last_seq.get(trial_id, 0)
        if seq != previous + 1:
            self.gaps.append(SeqGap(trial_id, previous, seq))
        last_seq[trial_id] = seq
        self._last_position[trial_id] = position
        if trial_id in self.broken:
            return
        state = self.states.get(trial_id)
        if state is None:
            state = self.states[trial_id] = TrialState(trial_id)
        # epoch and time (the fold's own findings come first). The checks of a row with the
        # epoch and time of the row checked just before it, which passed them, pass again
        # and change nothing: its epoch is the latest, its session's latest time >= it.
        epoch = row[11]
        placed: tuple[str, Any, Any] | None = None
        if item is not None or epoch != self._placed_epoch or recorded_at != self._placed_at:
            placed = self._row_found(epoch, recorded_at, damage)
            if placed is None and item is None:
                self._placed_epoch, self._placed_at = epoch, recorded_at
            else:
                self._placed_epoch = None
        found: tuple[str, Any, Any] | None = None
        try:
            event = self._events.get((row[3], row[4], row[5]))
            if event is None:
                event = self._event(row, item)
            record = self._apply(state, event)
            status_before = row[7]
            text = row[10]
            if item is None and text is not None and status_before is not None \
                    and status_before == record.status_before \
                    and row[8] == record.status_after \
                    and row[9] == (record.decision or None) \
                    and self._matching.get(text) == record.counters:  # fmt: skip
                found = _error_type_vs(status_before, row[6], event, record)
            else:
                found = self._recorded_vs(row, item, record) or _error_type_vs(
                    status_before, row[6], event, record)
        except EventDecodeError as exc:
            found = ("event", row[3], str(exc))
        except InvalidTransitionError as exc:
            found = ("transition", row[7], str(exc))
        found = found or placed
        snapshot = self.snapshots.get(trial_id)
        if found is None and snapshot is not None and snapshot.seq == state.seq:
            self.checked += 1
            if snapshot != state:
                found = ("snapshot", snapshot.to_dict(), state.to_dict())
        if found is not None:
            self._diverged(position, trial_id, seq, found)
        elif damage is not None and self.divergence is None:
            # A broken recorded column (not the event): named, the trial still folds on.
            self.divergence = Divergence(position, trial_id, seq, "recorded_at", damage, None)

    def _stored(self, row: Sequence[Any], item: StoredEvent | None) -> StoredEvent:
        """The row's record: its reads of the payload and counters word every error."""
        return item if item is not None else stored_event(row, self.experiment)

    def _event(self, row: Sequence[Any], item: StoredEvent | None) -> Event:
        """The row's event, as :attr:`StoredEvent.event` decodes it (and raises)."""
        key = (row[3], row[4], row[5])
        event = self._events.get(key)
        if event is not None:
            return event
        try:
            data = json.loads(row[5])
            event = decode_event(row[3], row[4], data) if type(data) is dict else None
        except (EventDecodeError, TypeError, ValueError):
            event = None
        if event is None:  # a broken row: its record says how, in its own words
            event = self._stored(row, item).event
        if len(self._events) >= _CACHED:
            self._events.clear()
        self._events[key] = event
        return event

    def _recorded_vs(self, row: Sequence[Any], item: StoredEvent | None,
                     record: TransitionRecord) -> tuple[str, Any, Any] | None:
        """The recorded status, decision and counters against the fold's ``record`` (the
        counters parsed first: a row whose counters do not parse is an ``event`` finding)."""
        text = row[10]
        counters: Any = None
        if text is not None and self._matching.get(text) != record.counters:
            counters = self._stored(row, item).counters
        status_before = row[7]
        # (Status and Decision are str enums: a recorded text equals its member.)
        if status_before is not None:  # appended without a record: nothing to compare
            if status_before != record.status_before:
                return "status_before", status_before, record.status_before.value
            if row[8] != record.status_after:
                return "status_after", row[8], record.status_after.value
            if row[9] != (record.decision or None):
                return "decision", row[9], record.decision.value if record.decision else None
        if counters is not None:
            replayed = record.counters._asdict()
            if counters != replayed:
                return "counters", counters, replayed
            if len(self._matching) >= _CACHED:
                self._matching.clear()
            self._matching[text] = record.counters
        return None

    def _row_found(self, epoch: int, recorded_at: datetime,
                   damage: str | None) -> tuple[str, Any, Any] | None:
        """The row's epoch and time against the sessions and the rows before it."""
        timed = damage is None  # an unreadable time is reported as the row's damage
        if self.sessions is not None:
            session = self.sessions.get(epoch)
            if session is None:
                return ("epoch", epoch, f"one of the sessions' epochs {sorted(self.sessions)}")
            if timed and session.kind != INGEST_KIND \
                    and recorded_at < session.started_at - CLOCK_TOLERANCE:
                return ("recorded_at", recorded_at.isoformat(),
                        f"not before its session (epoch {epoch}) started at "
                        f"{session.started_at.isoformat()}")  # fmt: skip
        if epoch < self._last_epoch:
            return ("epoch", epoch,
                    f">= {self._last_epoch} (an earlier row's epoch: a fenced driver's row)")
        self._last_epoch = epoch
        last_time = self._last_time.get(epoch)
        if not timed:
            return None
        if last_time is not None and recorded_at < last_time - CLOCK_TOLERANCE:
            return ("recorded_at", recorded_at.isoformat(),
                    f"not before the previous row of the same session ({last_time.isoformat()})")
        if last_time is None or recorded_at > last_time:
            self._last_time[epoch] = recorded_at
        return None

    def _diverged(
        self, position: int, trial_id: str, seq: int, found: tuple[str, Any, Any]
    ) -> None:
        self.broken.add(trial_id)
        if self.divergence is None:
            self.divergence = Divergence(position, trial_id, seq, *found)

    def result(self) -> VerifyResult:
        """The outcome; a snapshot ahead of its trial's last row diverges at that row."""
        for trial_id, snapshot in self.snapshots.items():
            last = self._last_seq.get(trial_id, 0)
            if snapshot.seq > last and trial_id not in self.broken:
                self._diverged(self._last_position.get(trial_id, 0), trial_id, last, (
                    "snapshot", f"snapshot at seq {snapshot.seq}",
                    f"the trial's last event is seq {last}",
                ))  # fmt: skip
        return VerifyResult(
            experiment=self.experiment,
            trials=len(self._last_seq),
            events=self.count,
            snapshots_checked=self.checked,
            divergence=self.divergence,
            gaps=tuple(self.gaps),
        )


def _error_type_vs(
    status_before: str | None, error_type: str | None, event: Event, record: TransitionRecord
) -> tuple[str, Any, Any] | None:
    """The ``error_type`` column against the error the event and its transition carry."""
    error = record.error if status_before is not None else None
    if error is None and isinstance(event, TrialFailed):
        error = event.error
    expected = error.kind if error is not None else None
    if error_type != expected:
        return ("error_type", error_type, expected)
    return None


def session_spans(store: VerifiableHistory, experiment: str) -> list[SessionSpan] | None:
    """The experiment's sessions as :class:`Verifier` needs them (``None``: unreadable)."""
    try:
        return [SessionSpan(s.epoch, s.started_at, s.kind)
                for s in store.list_sessions(experiment)]
    except (StateMachineError, ValueError):
        return None


def verify(store: VerifiableHistory, experiment: str, *, machine: bool = False) -> VerifyResult:
    """Fold the experiment's log again and compare with what it recorded.

    Checks, in global position order: every row decodes, every event is a valid transition,
    every recorded status/decision/counters and ``error_type`` equals the fold's, every
    row's epoch is a recorded driver session's and never older than an earlier row's, times
    do not go back within a session (beyond :data:`CLOCK_TOLERANCE`) nor before it started
    (except in an ``ingest`` session, whose events carry the times of Ray's history),
    the trial's sequence numbers have no gap, and every usable snapshot equals the fold at
    its seq (a snapshot ahead of its trial's last event diverges). Reports the first
    divergence (by position) and every gap; trials after their divergence are not folded on.

    The fold runs the table compiled from the ``transitions`` machine (the live path's), or
    with ``machine`` the machine itself. Rows are read in pages and checked as they come:
    memory holds one state per trial.
    """
    verifier = Verifier(
        experiment,
        snapshots=store.load_snapshots(experiment),
        sessions=session_spans(store, experiment),
        machine=machine,
    )
    with collector_paused():
        if isinstance(store, RowHistory):
            for row in store.read_event_rows(experiment):
                verifier.feed_row(row)
        else:
            for item in store.read_experiment(experiment):
                verifier.feed(item)
    return verifier.result()
