"""Replay: fold stored events back into trial states, and verify a log against its own fold.

One replay engine (:func:`_fold_trial`), through the table compiled from the ``transitions``
machine (:mod:`statemachine.domain.compiled`, the fold a live :class:`ExperimentLog` records
with): a trial's rows are decoded in order, up to the first that does not decode, and their
events folded, up to the first that does not fold; that row is the trial's ``halted_at``.
Rows come as stored events (:func:`fold_stored`, :func:`replay_trial`, ``replay_experiment``
with steps) or, for a whole experiment without steps, as lean tuples decoded in bulk.
:func:`verify` folds through the ``transitions`` machine itself, the definition, so it checks
every decision the live path recorded against it.

``policy=`` replays under another retry policy (a what-if). Such a replay may reach an event
the log holds but the new policy makes impossible (the trial already ended in ``ERROR``); the
fold stops there and says so in :attr:`TrialReplay.halted_at` instead of raising.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from statemachine.domain.compiled import apply_compiled, fold_compiled
from statemachine.domain.events import Event, TrialFailed, decode_event
from statemachine.domain.machine import TransitionRecord, apply
from statemachine.domain.policy import RetryPolicy
from statemachine.domain.state import TrialState
from statemachine.exceptions import EventDecodeError, InvalidTransitionError, StateMachineError
from statemachine.log.bulk import collector_paused
from statemachine.log.records import INGEST_KIND, StoredEvent
from statemachine.log.store import EventStore


@dataclass(frozen=True, slots=True)
class ReplayStep:
    """One stored event and what the fold did with it."""

    stored: StoredEvent
    record: TransitionRecord


@dataclass(slots=True)
class TrialReplay:
    """A trial folded from its stored events.

    Attributes:
        trial_id: the trial.
        state: the state after the last event folded.
        steps: each folded event with its transition record (empty when not asked for).
        halted_at: the first event the fold could not apply (``None``: all were applied).
        halt_reason: why (an invalid transition under a what-if policy, a row whose event or
            recorded counters do not decode).
    """

    trial_id: str
    state: TrialState
    steps: list[ReplayStep] = field(default_factory=list)
    halted_at: StoredEvent | None = None
    halt_reason: str | None = None


#: A stored row, or its position (read in full only when needed: :func:`_stored_at`).
_Row = StoredEvent | int
#: Where a trial's decoding stopped: ``(the row, why)``.
_Halt = tuple[_Row, str]


def _fold_trial(
    trial_id: str,
    events: Sequence[Event],
    rows: Sequence[_Row],
    policy: RetryPolicy | None,
    state: TrialState | None,
    keep_steps: bool,
    decode_halt: _Halt | None = None,
    read: Callable[[int], StoredEvent] | None = None,
) -> TrialReplay:
    """The replay engine: fold a trial's decoded ``events`` (``rows[i]`` is where
    ``events[i]`` is stored: a row, or a position ``read`` reads) from ``state``; halt at
    the first that does not fold, else at ``decode_halt`` (the first row that did not
    decode)."""

    def full(row: _Row) -> StoredEvent:
        if isinstance(row, StoredEvent):
            return row
        assert read is not None
        return read(row)

    replay = TrialReplay(trial_id, state.copy() if state is not None else TrialState(trial_id))
    if not keep_steps:
        try:
            replay.state = fold_compiled(trial_id, events, policy, replay.state)
            events = ()  # all folded: nothing to step through
        except InvalidTransitionError:
            pass  # rare: step from the start to find the event that does not fold
    for index, event in enumerate(events):
        try:
            record = apply_compiled(replay.state, event, policy)
        except InvalidTransitionError as exc:
            decode_halt = (rows[index], str(exc))
            break
        if keep_steps:
            replay.steps.append(ReplayStep(full(rows[index]), record))
    else:
        if decode_halt is None:
            return replay
    row, replay.halt_reason = decode_halt
    replay.halted_at = full(row)
    return replay


def _decode_rows(stored: Iterable[StoredEvent]) -> tuple[list[Event], list[StoredEvent],
                                                         _Halt | None]:
    """A trial's rows decoded in order, up to the first whose event or recorded counters do
    not decode (a row is whole only if its counters parse too)."""
    events: list[Event] = []
    rows: list[StoredEvent] = []
    for item in stored:
        try:
            event = item.event
            _ = item.counters
        except EventDecodeError as exc:
            return events, rows, (item, str(exc))
        events.append(event)
        rows.append(item)
    return events, rows, None


def fold_stored(
    trial_id: str,
    stored: Iterable[StoredEvent],
    *,
    policy: RetryPolicy | None = None,
    state: TrialState | None = None,
    keep_steps: bool = True,
) -> TrialReplay:
    """Fold one trial's stored events (in seq order) from ``state`` (default: a new trial)."""
    events, rows, halt = _decode_rows(stored)
    return _fold_trial(trial_id, events, rows, policy, state, keep_steps, halt)


def replay_trial(
    store: EventStore,
    experiment: str,
    trial_id: str,
    *,
    upto_seq: int | None = None,
    upto_time: datetime | None = None,
    policy: RetryPolicy | None = None,
) -> TrialReplay:
    """A trial's state and timeline from its events (up to a seq or a time; what-if policy)."""
    events = store.read_trial(experiment, trial_id, upto_seq=upto_seq, upto_time=upto_time)
    return fold_stored(trial_id, events, policy=policy)


def replay_experiment(
    store: EventStore,
    experiment: str,
    *,
    upto_position: int | None = None,
    upto_time: datetime | None = None,
    policy: RetryPolicy | None = None,
    keep_steps: bool = False,
) -> dict[str, TrialReplay]:
    """Every trial of an experiment folded from its full log (never from snapshots).

    ``upto_position``/``upto_time`` fold only the events at or before that global position
    or time: the experiment as it was then.
    """
    if not keep_steps:
        with collector_paused():
            return _replay_lean(store, experiment, upto_position, upto_time, policy)
    by_trial: dict[str, list[StoredEvent]] = {}
    for item in store.read_experiment(experiment, upto_time=upto_time):
        if upto_position is not None and item.position > upto_position:
            break
        by_trial.setdefault(item.trial_id, []).append(item)
    return {trial_id: fold_stored(trial_id, rows, policy=policy)
            for trial_id, rows in by_trial.items()}


def _stored_at(store: EventStore, experiment: str, position: int) -> StoredEvent:
    """The full row at ``position`` (for a halt: only the rare row that stops a fold)."""
    return next(iter(store.read_experiment(experiment, from_position=position - 1, limit=1)))


def _replay_lean(
    store: EventStore,
    experiment: str,
    upto_position: int | None,
    upto_time: datetime | None,
    policy: RetryPolicy | None,
) -> dict[str, TrialReplay]:
    """:func:`replay_experiment` without steps, from lean rows decoded in bulk.

    Rows decode and their counters are checked in position order; a row that does not is
    read in full and decoded as :func:`fold_stored` decodes it (the same halt, worded the
    same); the full row of a halt is read only then.
    """
    pending: dict[str, list[Event]] = {}
    positions: dict[str, list[int]] = {}
    halted: dict[str, _Halt] = {}
    good_counters: set[str] = set()
    loads = json.loads
    for position, trial_id, _seq, type_name, version, payload, counters in store.read_fold_rows(
        experiment, upto_position=upto_position, upto_time=upto_time
    ):
        trial_events = pending.get(trial_id)
        if trial_events is None:
            trial_events = pending[trial_id] = []
            positions[trial_id] = []
        elif trial_id in halted:
            continue
        try:
            data = loads(payload)
            if type(data) is not dict:
                raise EventDecodeError("payload is not a JSON object")
            event = decode_event(type_name, version, data)
            if counters is not None and counters not in good_counters:
                parsed = loads(counters)
                if parsed is not None and type(parsed) is not dict:
                    raise EventDecodeError("counters is not a JSON object")
                if len(good_counters) < 100_000:
                    good_counters.add(counters)
        except (EventDecodeError, TypeError, ValueError):
            # Decide (and word the halt) exactly as fold_stored does, from the full row.
            row = _stored_at(store, experiment, position)
            _, _, halt = _decode_rows([row])
            if halt is not None:
                halted[trial_id] = halt
                continue
            event = row.event
        trial_events.append(event)
        positions[trial_id].append(position)

    def read(position: int) -> StoredEvent:
        return _stored_at(store, experiment, position)

    return {
        trial_id: _fold_trial(trial_id, trial_events, positions[trial_id], policy, None, False,
                              halted.get(trial_id), read)
        for trial_id, trial_events in pending.items()
    }


def rehydrate(store: EventStore, experiment: str) -> dict[str, TrialState]:
    """Every trial's current state: its newest usable snapshot plus the events after it.

    Always equal to a full replay (:func:`replay_experiment`): a snapshot that does not decode
    is ignored (one warning) and its trial folded from all its events. An event that does not
    fold raises, since a live log must fold.
    """
    with collector_paused():
        loaded = store.load_snapshot_set(experiment)
        states = loaded.states
        for item in store.read_tails(experiment, refold=loaded.unusable):
            state = states.get(item.trial_id)
            if state is None:
                state = states[item.trial_id] = TrialState(item.trial_id)
            apply_compiled(state, item.event)
    return states


# ---------------------------------------------------------------- verify


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


def _recorded_vs(item: StoredEvent, record: TransitionRecord) -> tuple[str, Any, Any] | None:
    checks: list[tuple[str, Any, Any]] = [
        ("status_before", item.status_before, record.status_before.value),
        ("status_after", item.status_after, record.status_after.value),
        ("decision", item.decision, record.decision.value if record.decision else None),
    ]
    if item.status_before is None:  # appended without a record: nothing to compare
        checks = []
    counters = item.counters
    if counters is not None:
        checks.append(("counters", counters, record.counters._asdict()))
    for name, recorded, replayed in checks:
        if recorded != replayed:
            return name, recorded, replayed
    return None


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


class Verifier:
    """The checks of :func:`verify`, fed one stored row at a time (in position order).

    Shared by :func:`verify` (rows from the store) and ``import`` (rows from the export file,
    checked before anything is written). Memory holds one state per trial, never the rows.
    ``sessions`` (``None``: not known) enables the epoch and start-time checks.
    """

    def __init__(
        self,
        experiment: str,
        *,
        snapshots: dict[str, TrialState] | None = None,
        sessions: Iterable[SessionSpan] | None = None,
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
        self._last_seq: dict[str, int] = {}
        self._last_position: dict[str, int] = {}
        self._last_epoch = 0
        self._last_time: dict[int, datetime] = {}

    def feed(self, item: StoredEvent) -> None:
        """Check one row."""
        self.count += 1
        previous = self._last_seq.get(item.trial_id, 0)
        if item.seq != previous + 1:
            self.gaps.append(SeqGap(item.trial_id, previous, item.seq))
        self._last_seq[item.trial_id] = item.seq
        self._last_position[item.trial_id] = item.position
        if item.trial_id in self.broken:
            return
        state = self.states.setdefault(item.trial_id, TrialState(item.trial_id))
        placed = self._row_found(item)  # epoch and time; the fold's own findings come first
        found: tuple[str, Any, Any] | None
        try:
            event = item.event
            record = apply(state, event)
            found = _recorded_vs(item, record) or _error_type_vs(item, event, record)
        except EventDecodeError as exc:
            found = ("event", item.type_name, str(exc))
        except InvalidTransitionError as exc:
            found = ("transition", item.status_before, str(exc))
        found = found or placed
        snapshot = self.snapshots.get(item.trial_id)
        if found is None and snapshot is not None and snapshot.seq == state.seq:
            self.checked += 1
            if snapshot != state:
                found = ("snapshot", snapshot.to_dict(), state.to_dict())
        if found is not None:
            self._diverged(item.position, item.trial_id, item.seq, found)
        elif item.damage is not None and self.divergence is None:
            # A broken recorded column (not the event): named, the trial still folds on.
            self.divergence = Divergence(item.position, item.trial_id, item.seq,
                                         "recorded_at", item.damage, None)

    def _row_found(self, item: StoredEvent) -> tuple[str, Any, Any] | None:
        """The row's epoch and time against the sessions and the rows before it."""
        timed = item.damage is None  # an unreadable time is reported as the row's damage
        if self.sessions is not None:
            session = self.sessions.get(item.epoch)
            if session is None:
                return ("epoch", item.epoch, f"one of the sessions' epochs {sorted(self.sessions)}")
            if timed and session.kind != INGEST_KIND \
                    and item.recorded_at < session.started_at - CLOCK_TOLERANCE:
                return ("recorded_at", item.recorded_at.isoformat(),
                        f"not before its session (epoch {item.epoch}) started at "
                        f"{session.started_at.isoformat()}")  # fmt: skip
        if item.epoch < self._last_epoch:
            return ("epoch", item.epoch,
                    f">= {self._last_epoch} (an earlier row's epoch: a fenced driver's row)")
        self._last_epoch = item.epoch
        last_time = self._last_time.get(item.epoch)
        if not timed:
            return None
        if last_time is not None and item.recorded_at < last_time - CLOCK_TOLERANCE:
            return ("recorded_at", item.recorded_at.isoformat(),
                    f"not before the previous row of the same session ({last_time.isoformat()})")
        if last_time is None or item.recorded_at > last_time:
            self._last_time[item.epoch] = item.recorded_at
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
    item: StoredEvent, event: Event, record: TransitionRecord
) -> tuple[str, Any, Any] | None:
    """The ``error_type`` column against the error the event and its transition carry."""
    error = record.error if item.status_before is not None else None
    if error is None and isinstance(event, TrialFailed):
        error = event.error
    expected = error.kind if error is not None else None
    if item.error_type != expected:
        return ("error_type", item.error_type, expected)
    return None


def session_spans(store: EventStore, experiment: str) -> list[SessionSpan] | None:
    """The experiment's sessions as :class:`Verifier` needs them (``None``: unreadable)."""
    try:
        return [SessionSpan(s.epoch, s.started_at, s.kind)
                for s in store.list_sessions(experiment)]
    except (StateMachineError, ValueError):
        return None


def verify(store: EventStore, experiment: str) -> VerifyResult:
    """Fold the experiment's log with the live code path and compare with what it recorded.

    Checks, in global position order: every row decodes, every event is a valid transition,
    every recorded status/decision/counters and ``error_type`` equals the fold's, every
    row's epoch is a recorded driver session's and never older than an earlier row's, times
    do not go back within a session (beyond :data:`CLOCK_TOLERANCE`) nor before it started
    (except in an ``ingest`` session, whose events carry the times of Ray's history),
    the trial's sequence numbers have no gap, and every usable snapshot equals the fold at
    its seq (a snapshot ahead of its trial's last event diverges). Reports the first
    divergence (by position) and every gap; trials after their divergence are not folded on.
    """
    verifier = Verifier(
        experiment,
        snapshots=store.load_snapshots(experiment),
        sessions=session_spans(store, experiment),
    )
    for item in store.read_experiment(experiment):
        verifier.feed(item)
    return verifier.result()
