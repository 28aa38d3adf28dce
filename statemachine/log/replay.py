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
from datetime import datetime
from typing import Any

from statemachine.domain.compiled import apply_compiled, fold_compiled
from statemachine.domain.events import Event, decode_event
from statemachine.domain.machine import TransitionRecord, apply
from statemachine.domain.policy import RetryPolicy
from statemachine.domain.state import TrialState
from statemachine.exceptions import EventDecodeError, InvalidTransitionError
from statemachine.log.records import StoredEvent
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

    ``field`` is one of ``status_before``, ``status_after``, ``decision``, ``counters``
    (recorded vs replayed), ``transition`` (the event is not valid where the fold is),
    ``event`` (the row does not decode) or ``snapshot`` (a snapshot differs from the fold).
    """

    position: int
    trial_id: str
    seq: int
    field: str
    recorded: Any
    replayed: Any

    def describe(self) -> str:
        """One line for people."""
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


def verify(store: EventStore, experiment: str) -> VerifyResult:
    """Fold the experiment's log with the live code path and compare with what it recorded.

    Checks, in global position order: every row decodes, every event is a valid transition,
    every recorded status/decision/counters equals the fold's, the trial's sequence numbers
    have no gap, and every usable snapshot equals the fold at its seq. Reports the first
    divergence (by position) and every gap; trials after their divergence are not folded on.
    """
    snapshots = store.load_snapshots(experiment)
    states: dict[str, TrialState] = {}
    broken: set[str] = set()
    divergence: Divergence | None = None
    gaps: list[SeqGap] = []
    count = checked = 0
    last_seq: dict[str, int] = {}
    for item in store.read_experiment(experiment):
        count += 1
        previous = last_seq.get(item.trial_id, 0)
        if item.seq != previous + 1:
            gaps.append(SeqGap(item.trial_id, previous, item.seq))
        last_seq[item.trial_id] = item.seq
        if item.trial_id in broken:
            continue
        state = states.setdefault(item.trial_id, TrialState(item.trial_id))
        found: tuple[str, Any, Any] | None
        try:
            record = apply(state, item.event)
            found = _recorded_vs(item, record)
        except EventDecodeError as exc:
            found = ("event", item.type_name, str(exc))
        except InvalidTransitionError as exc:
            found = ("transition", item.status_before, str(exc))
        snapshot = snapshots.get(item.trial_id)
        if found is None and snapshot is not None and snapshot.seq == state.seq:
            checked += 1
            if snapshot != state:
                found = ("snapshot", snapshot.to_dict(), state.to_dict())
        if found is not None:
            broken.add(item.trial_id)
            if divergence is None:
                divergence = Divergence(item.position, item.trial_id, item.seq, *found)
    return VerifyResult(
        experiment=experiment,
        trials=len(last_seq),
        events=count,
        snapshots_checked=checked,
        divergence=divergence,
        gaps=tuple(gaps),
    )
