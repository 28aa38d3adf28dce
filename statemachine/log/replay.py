"""Replay: fold stored events back into trial states.

Every fold runs the table compiled from the ``transitions`` machine
(:mod:`statemachine.domain.compiled`, the fold a live :class:`ExperimentLog` records with): a
trial's rows are decoded in order, up to the first that does not decode, and their events
folded, up to the first that does not fold; that row is the trial's ``halted_at``. Rows come
as stored events (:func:`fold_stored`, :func:`replay_trial`, ``replay_experiment`` with
steps: :func:`_fold_trial`) or, for a whole experiment without steps, as lean tuples read in
pages and folded as they come (:func:`_replay_lean`: one state per trial in memory), from any
history (:mod:`.history`: a store, or anything that reads the same rows). Verification, which
folds again and checks every recorded column, is :mod:`.verification`.

``policy=`` replays under another retry policy (a what-if). Such a replay may reach an event
the log holds but the new policy makes impossible (the trial already ended in ``ERROR``); the
fold stops there and says so in :attr:`TrialReplay.halted_at` instead of raising.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from statemachine.domain.compiled import apply_compiled, fold_compiled, step_compiled
from statemachine.domain.events import Event, decode_event
from statemachine.domain.machine import TransitionRecord
from statemachine.domain.node_tally import TrialNodes
from statemachine.domain.policy import RetryPolicy
from statemachine.domain.state import TrialState
from statemachine.domain.status import Status
from statemachine.exceptions import EventDecodeError, InvalidTransitionError
from statemachine.log.bulk import collector_paused
from statemachine.log.history import ReplayHistory, SnapshotHistory
from statemachine.log.node_shares import ATTEMPT_TYPES, count_share
from statemachine.log.records import StoredEvent
from statemachine.log.snapshot import Share


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


#: Where a trial's fold stopped: ``(the row, or its position, read in full only then by
#: :func:`_stored_at`; why)``.
_Halt = tuple[StoredEvent | int, str]


def _fold_trial(
    trial_id: str,
    events: Sequence[Event],
    rows: Sequence[StoredEvent],
    policy: RetryPolicy | None,
    state: TrialState | None,
    keep_steps: bool,
    decode_halt: tuple[StoredEvent, str] | None = None,
) -> TrialReplay:
    """Fold a trial's decoded ``events`` (``rows[i]`` is where ``events[i]`` is stored) from
    ``state``; halt at the first that does not fold, else at ``decode_halt`` (the first row
    that did not decode)."""
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
            replay.steps.append(ReplayStep(rows[index], record))
    else:
        if decode_halt is None:
            return replay
    replay.halted_at, replay.halt_reason = decode_halt
    return replay


def _decode_rows(stored: Iterable[StoredEvent]) -> tuple[list[Event], list[StoredEvent],
                                                         tuple[StoredEvent, str] | None]:
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
    store: ReplayHistory,
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
    store: ReplayHistory,
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


def _stored_at(store: ReplayHistory, experiment: str, position: int) -> StoredEvent:
    """The full row at ``position`` (for a halt: only the rare row that stops a fold)."""
    return next(iter(store.read_experiment(experiment, from_position=position - 1, limit=1)))


def _replay_lean(
    store: ReplayHistory,
    experiment: str,
    upto_position: int | None,
    upto_time: datetime | None,
    policy: RetryPolicy | None,
) -> dict[str, TrialReplay]:
    """:func:`replay_experiment` without steps, from lean rows read in pages and folded as
    they come: memory holds one state per trial, never the rows.

    Each row is decoded (and its counters checked) and folded into its trial's state; the
    first row of a trial that does not decode or fold halts that trial, as
    :func:`fold_stored` halts it (a row that does not decode is read in full and decoded as
    it decodes it: the same halt, worded the same); the full row of a halt is read only then.
    """
    states: dict[str, TrialState] = {}
    halted: dict[str, _Halt] = {}
    good_counters: set[str] = set()
    loads = json.loads
    step = step_compiled  # no record: only the state is the answer
    for position, trial_id, _seq, type_name, version, payload, counters in store.read_fold_rows(
        experiment, upto_position=upto_position, upto_time=upto_time
    ):
        state = states.get(trial_id)
        if state is None:
            state = states[trial_id] = TrialState(trial_id)
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
        try:
            step(state, event, policy or state.policy)
        except InvalidTransitionError as exc:
            halted[trial_id] = (position, str(exc))
    replays: dict[str, TrialReplay] = {}
    for trial_id, state in states.items():
        replay = replays[trial_id] = TrialReplay(trial_id, state)
        stop = halted.get(trial_id)
        if stop is not None:
            where, replay.halt_reason = stop
            replay.halted_at = where if isinstance(where, StoredEvent) else _stored_at(
                store, experiment, where)
    return replays


def share_of(steps: Iterable[ReplayStep]) -> TrialNodes:
    """The share of the per-node tally of a trial folded from its start (its steps)."""
    share = TrialNodes()
    for step in steps:
        share.count(step.stored.seq, step.stored.event,
                    step.record.status_after is Status.RESTORING)
    return share


def rehydrate(
    store: SnapshotHistory, experiment: str, shares: dict[str, Share] | None = None
) -> dict[str, TrialState]:
    """Every trial's current state: its newest usable snapshot plus the events after it.

    Always equal to a full replay (:func:`replay_experiment`): a snapshot that does not decode
    is ignored (one warning) and its trial folded from all its events. An event that does not
    fold raises, since a live log must fold. ``shares``: filled in with each trial's share of
    the per-node tally at its state (:mod:`statemachine.log.node_shares`; ``None`` for a
    trial whose snapshot has none).
    """
    with collector_paused():
        loaded = store.load_snapshot_set(experiment)
        states = loaded.states
        if shares is not None:
            shares.update({t: loaded.shares.get(t) for t in states})
        for item in store.read_tails(experiment, refold=loaded.unusable):
            state = states.get(item.trial_id)
            if state is None:
                state = states[item.trial_id] = TrialState(item.trial_id)
                if shares is not None:
                    shares[item.trial_id] = TrialNodes()  # folded from its start
            event = item.event
            apply_compiled(state, event)
            if shares is not None and type(event) in ATTEMPT_TYPES:
                count_share(shares, item.trial_id, state.seq, event,
                            state.status is Status.RESTORING)
    return states
