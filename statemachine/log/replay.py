"""Replay: fold stored events back into trial states, and verify a log against its own fold.

Two folds, one state machine:
- :func:`replay_trial` and :func:`verify` step through :func:`statemachine.domain.machine.apply`
  (the ``transitions`` machine, the definition), so ``verify`` checks every decision the live
  path recorded against it;
- :func:`replay_experiment` and :func:`rehydrate` fold in bulk through the table compiled from
  that same machine (:mod:`statemachine.domain.compiled`, proven equal by a property test),
  the very path a live :class:`ExperimentLog` records with.

``policy=`` replays under another retry policy (a what-if). Such a replay may reach an event
the log holds but the new policy makes impossible (the trial already ended in ``ERROR``); the
fold stops there and says so in :attr:`TrialReplay.halted_at` instead of raising.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
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

Apply = Callable[[TrialState, Any, "RetryPolicy | None"], TransitionRecord]


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


def fold_stored(
    trial_id: str,
    stored: Iterable[StoredEvent],
    *,
    policy: RetryPolicy | None = None,
    state: TrialState | None = None,
    keep_steps: bool = True,
    step: Apply = apply,
) -> TrialReplay:
    """Fold one trial's stored events (in seq order) from ``state`` (default: a new trial)."""
    replay = TrialReplay(trial_id, state.copy() if state is not None else TrialState(trial_id))
    for item in stored:
        record = _fold_row(replay, item, policy, step)
        if record is None:
            break
        if keep_steps:
            replay.steps.append(ReplayStep(item, record))
    return replay


def _fold_row(
    replay: TrialReplay, item: StoredEvent, policy: RetryPolicy | None, step: Apply
) -> TransitionRecord | None:
    """Fold one stored row into ``replay``; a row that does not decode or fold halts it."""
    try:
        event = item.event
        _ = item.counters  # a row is whole only if its recorded counters parse too
        return step(replay.state, event, policy)
    except (InvalidTransitionError, EventDecodeError) as exc:
        replay.halted_at, replay.halt_reason = item, str(exc)
        return None


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
    replays: dict[str, TrialReplay] = {}
    for item in store.read_experiment(experiment, upto_time=upto_time):
        if upto_position is not None and item.position > upto_position:
            break
        replay = replays.get(item.trial_id)
        if replay is None:
            replay = replays[item.trial_id] = TrialReplay(item.trial_id, TrialState(item.trial_id))
        if replay.halted_at is not None:
            continue
        record = _fold_row(replay, item, policy, apply_compiled)
        if record is not None:
            replay.steps.append(ReplayStep(item, record))
    return replays


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
    """:func:`replay_experiment` without steps: lean rows, each trial folded by ``fold_compiled``.

    The same result as the stepwise fold: rows decode and their counters are checked in
    position order; a trial stops at its first row that does not decode or fold, and that
    row (read in full, with the very error the stepwise fold gives) is its ``halted_at``.
    """
    pending: dict[str, list[Event]] = {}
    positions: dict[str, list[int]] = {}
    halted: dict[str, TrialReplay] = {}
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
            # Decide (and word the halt) exactly as the stepwise fold does, from the full row.
            row = _stored_at(store, experiment, position)
            try:
                event = row.event
                _ = row.counters
            except EventDecodeError as exc:
                halted[trial_id] = TrialReplay(
                    trial_id, TrialState(trial_id), halted_at=row, halt_reason=str(exc)
                )
                continue
        trial_events.append(event)
        positions[trial_id].append(position)
    replays: dict[str, TrialReplay] = {}
    for trial_id, trial_events in pending.items():
        try:
            replay = TrialReplay(trial_id, fold_compiled(trial_id, trial_events, policy))
        except InvalidTransitionError:
            # Rare: find the event that does not fold, stepping as the stepwise fold does.
            replay = TrialReplay(trial_id, TrialState(trial_id))
            for event, position in zip(trial_events, positions[trial_id], strict=True):
                try:
                    apply_compiled(replay.state, event, policy)
                except InvalidTransitionError as exc:
                    replay.halted_at = _stored_at(store, experiment, position)
                    replay.halt_reason = str(exc)
                    break
        decode_halt = halted.get(trial_id)
        if decode_halt is not None and replay.halted_at is None:
            replay.halted_at, replay.halt_reason = decode_halt.halted_at, decode_halt.halt_reason
        replays[trial_id] = replay
    return replays


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
