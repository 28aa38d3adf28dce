"""The trial state machine: states, guarded transitions and their effects, with ``transitions``.

One :class:`transitions.Machine` is built once for all trials (``auto_transitions`` off, no
registered models) and drives plain :class:`TrialState` objects through
``machine.events[trigger].trigger(state, ...)``. Building it per trial, or registering every
trial with ``add_model``, costs far more and grows faster than linearly (measured by
``python -m benchmarks --section fold``, in ``benchmarks/fsm.py``).

Guards are evaluated in the order the transitions are listed; the first whose conditions all
hold fires, runs its effects (the ``before`` callbacks) and moves the trial to its destination.
Effects mutate only the trial state; the whole module is pure: no I/O, no clock, no randomness.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, cast

from transitions import EventData, Machine, MachineError

from statemachine.domain.events import (
    CheckpointSaved,
    CheckpointsDiscarded,
    CountersAdopted,
    Event,
    PolicySet,
    TrialFailed,
    TrialRecreated,
    TrialReset,
    TrialStarted,
)
from statemachine.domain.failures import ActorError, RestoreError, TrialError
from statemachine.domain.policy import ExhaustionAction, RestorePhase, RetryPolicy
from statemachine.domain.state import CHECKPOINT_HISTORY, Counters, TrialState
from statemachine.domain.status import Decision, Status
from statemachine.exceptions import InvalidTransitionError

# transitions logs every callback at INFO; a fold of millions of events must not.
logging.getLogger("transitions").setLevel(logging.WARNING)

Guard = Callable[[EventData], bool]
Effect = Callable[[EventData], None]

LIVE = [Status.PENDING, Status.RUNNING, Status.PAUSED, Status.RESTORING]
ENDED = [Status.TERMINATED, Status.ERROR]


class TransitionRecord(NamedTuple):
    """What one event did to a trial: the answer to every ``apply``.

    An immutable named tuple (it is built once per recorded event: a tuple is several
    times cheaper to make than a frozen dataclass).
    """

    trial_id: str
    event: str
    status_before: Status
    status_after: Status
    decision: Decision | None
    counters: Counters
    error: TrialError | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of this record."""
        return {
            "trial_id": self.trial_id,
            "event": self.event,
            "status_before": self.status_before.value,
            "status_after": self.status_after.value,
            "decision": self.decision.value if self.decision else None,
            "counters": self.counters._asdict(),
            "error": self.error.to_dict() if self.error else None,
        }


# ---------------------------------------------------------------- guards (pure predicates)


#: The trial state an event folds into (``ed.model``; read in C, for every guard and effect).
_state = cast("Callable[[EventData], TrialState]", operator.attrgetter("model"))


def _policy(ed: EventData) -> RetryPolicy:
    return ed.kwargs["policy"]  # type: ignore[no-any-return]


def _error(ed: EventData) -> TrialError:
    event = ed.kwargs["event"]
    assert isinstance(event, TrialFailed)
    return event.error


def has_checkpoint(ed: EventData) -> bool:
    """The trial has a checkpoint to restore from (known, or named by the start event)."""
    event = ed.kwargs["event"]
    restore_from = event.restore_from if isinstance(event, TrialStarted) else None
    return restore_from is not None or _state(ed).latest_checkpoint is not None


def is_fatal(ed: EventData) -> bool:
    """The failure is an ``AbortError`` or its cause type is listed as fatal by the policy."""
    error = _error(ed)
    return not error.retryable or _policy(ed).is_fatal(error.cause_type)


def _episode(state: TrialState) -> tuple[str | None, int]:
    """The restore episode a failure belongs to: ``(checkpoint, restore failures)``.

    While RUNNING with an unconfirmed restore (see :func:`user_restore_failure`) that is the
    episode Ray closed when its own restore returned; otherwise the current one.
    """
    if state.status is Status.RUNNING and state.unconfirmed_restore is not None:
        return state.unconfirmed_restore, state.unconfirmed_restore_failures
    return state.restoring_from, state.restore_failures


def restore_retry_left(ed: EventData) -> bool:
    """Restore failures in this episode are still below ``restore_retry_num``."""
    return _episode(_state(ed))[1] < _policy(ed).restore_retry_num


def user_restore_failure(ed: EventData) -> bool:
    """A failure while RUNNING that belongs to the restore Ray already called succeeded.

    The attempt started from a checkpoint and has reported no result yet, and either the
    user's code marked its own restore (a ``RestoreError`` raised by
    ``statemachine.tune.restoring()``) or the policy's ``restore_phase`` is
    ``until_first_report``.
    """
    state = _state(ed)
    if state.unconfirmed_restore is None:
        return False
    return (isinstance(_error(ed), RestoreError)
            or _policy(ed).restore_phase is RestorePhase.UNTIL_FIRST_REPORT)


def next_failure_within(ed: EventData) -> bool:
    """Counting this failure keeps the trial within ``max_failures`` (Ray's should_recover)."""
    return _policy(ed).within_max_failures(_state(ed).failures + 1)


def failures_within(ed: EventData) -> bool:
    """The failures counted so far are within ``max_failures``."""
    return _policy(ed).within_max_failures(_state(ed).failures)


def uncounted_preemption(ed: EventData) -> bool:
    """A preempted actor, and the policy does not count preemptions as failures."""
    error = _error(ed)
    return (
        isinstance(error, ActorError)
        and error.preempted
        and not _policy(ed).count_preemption_as_failure
    )


def preemption_budget_left(ed: EventData) -> bool:
    """The separate preemption budget (if any) allows one more preemption."""
    limit = _policy(ed).max_preemptions
    return limit is None or _state(ed).preemptions + 1 <= limit


def on_exhausted(action: ExhaustionAction) -> Guard:
    """Guard: the policy's exhaustion action is ``action``."""

    def guard(ed: EventData) -> bool:
        return _policy(ed).on_restore_exhausted is action

    guard.__name__ = f"on_exhausted_{action.value}"
    return guard


def has_older_checkpoint(ed: EventData) -> bool:
    """There is a known checkpoint to fall back to, other than the one that failed.

    That is one older than the checkpoint being restored, or any known checkpoint when the
    one being restored is not among them (named by the start event, or discarded since).
    """
    state = _state(ed)
    current = _episode(state)[0] or state.latest_checkpoint
    if current not in state.checkpoints:
        return bool(state.checkpoints)
    return state.checkpoints.index(current) > 0


# ---------------------------------------------------------------- effects


def record_error(ed: EventData) -> None:
    """Remember the failure as the trial's last error, and where it happened."""
    state = _state(ed)
    event = ed.kwargs["event"]
    state.last_error = event.error
    state.last_failure_node = event.node


def count_failure(ed: EventData) -> None:
    """One more failure against ``max_failures``."""
    _state(ed).failures += 1


def count_restore_retry(ed: EventData) -> None:
    """One more restore failure in this episode (a retry, not a failure)."""
    state = _state(ed)
    state.restore_failures += 1
    state.total_restore_failures += 1


def count_exhausted_restore(ed: EventData) -> None:
    """A restore failure past the retries: counted in the total only (Ray keeps the episode)."""
    _state(ed).total_restore_failures += 1


def exclude_failed_node(ed: EventData) -> None:
    """With ``avoid_failed_nodes``, the episode's next attempt avoids the node that failed.

    Only a node whose id is known is excluded; with the default policy nothing changes.
    """
    if not _policy(ed).avoid_failed_nodes:
        return
    node = ed.kwargs["event"].node
    state = _state(ed)
    if node is not None and node.node_id and node.node_id not in state.excluded_nodes:
        state.excluded_nodes = (*state.excluded_nodes, node.node_id)


def count_preemption(ed: EventData) -> None:
    """One more uncounted preemption."""
    _state(ed).preemptions += 1


def begin_restore(ed: EventData) -> None:
    """A restore episode refers to the checkpoint named by the start event, or the latest.

    Restoring from another checkpoint than the episode's (a driver restarted with an older
    experiment snapshot) starts a new episode: the restore counter refers to one checkpoint.
    """
    state = _state(ed)
    event = ed.kwargs["event"]
    target = (
        event.restore_from if isinstance(event, TrialStarted) and event.restore_from else None
    ) or state.latest_checkpoint
    if state.restoring_from is not None and target != state.restoring_from:
        state.restore_failures = 0
        state.excluded_nodes = ()
    state.restoring_from = target


def end_restore_episode(ed: EventData) -> None:
    """The restore episode is over: its counter goes back to 0, no node is avoided."""
    state = _state(ed)
    state.restore_failures = 0
    state.restoring_from = None
    state.excluded_nodes = ()


def hold_unconfirmed_restore(ed: EventData) -> None:
    """Ray's restore returned: keep its episode until the attempt's first result.

    Ray ends the episode here (its counter goes back to 0, as the fold's does); a function
    trainable loads its checkpoint only afterwards, in the user's code, so the episode is kept
    aside for a failure of that load.
    """
    state = _state(ed)
    state.unconfirmed_restore = state.restoring_from or state.latest_checkpoint
    state.unconfirmed_restore_failures = state.restore_failures


def reopen_restore_episode(ed: EventData) -> None:
    """A failure of the user's restore continues the episode held aside."""
    state = _state(ed)
    state.restoring_from = state.unconfirmed_restore
    state.restore_failures = state.unconfirmed_restore_failures
    state.unconfirmed_restore = None
    state.unconfirmed_restore_failures = 0
    state.user_restore_failed = True


def continue_user_restore(ed: EventData) -> None:
    """A new attempt of an attempt that restored and never reported (a driver restart, a
    pause): the episode held aside goes on when it is the user's restore (one of its
    failures was, or ``restore_phase`` is ``until_first_report``) and the checkpoint is the
    same; otherwise Ray's own restore had ended it."""
    state = _state(ed)
    held = state.unconfirmed_restore
    state.unconfirmed_restore = None
    if held is None:
        return
    event = ed.kwargs["event"]
    target = (
        event.restore_from if isinstance(event, TrialStarted) and event.restore_from else None
    ) or state.latest_checkpoint
    users = (state.user_restore_failed
             or _policy(ed).restore_phase is RestorePhase.UNTIL_FIRST_REPORT)
    if users and target == held and state.restoring_from is None:
        state.restoring_from = held
        state.restore_failures = state.unconfirmed_restore_failures
    else:
        state.user_restore_failed = False
    state.unconfirmed_restore_failures = 0


def close_user_restore(ed: EventData) -> None:
    """The restore is confirmed (a result came, or a failure outside the restore), or the
    trial starts without one: nothing is held aside any more."""
    state = _state(ed)
    state.unconfirmed_restore = None
    state.unconfirmed_restore_failures = 0
    state.user_restore_failed = False


def discard_all_checkpoints(ed: EventData) -> None:
    """Forget every checkpoint: the trial starts from scratch."""
    _state(ed).checkpoints = ()


def drop_restoring_checkpoint(ed: EventData) -> None:
    """Forget the checkpoint that failed to restore and every newer one (none if unknown)."""
    state = _state(ed)
    current = state.restoring_from or state.latest_checkpoint
    if current in state.checkpoints:
        state.checkpoints = state.checkpoints[: state.checkpoints.index(current)]


def add_checkpoint(ed: EventData) -> None:
    """Remember a new checkpoint as the latest."""
    event = ed.kwargs["event"]
    assert isinstance(event, CheckpointSaved)
    state = _state(ed)
    kept = state.checkpoints
    if event.checkpoint in kept:  # saved again: it moves to the end (the scan only then)
        kept = tuple(c for c in kept if c != event.checkpoint)
    state.checkpoints = (*kept, event.checkpoint)[-CHECKPOINT_HISTORY:]


def forget_discarded(ed: EventData) -> None:
    """Forget the checkpoints named by a ``CheckpointsDiscarded`` event."""
    event = ed.kwargs["event"]
    assert isinstance(event, CheckpointsDiscarded)
    gone = set(event.checkpoints)
    state = _state(ed)
    state.checkpoints = tuple(c for c in state.checkpoints if c not in gone)


def set_policy(ed: EventData) -> None:
    """The policy of a ``PolicySet`` event is in force from now on."""
    event = ed.kwargs["event"]
    assert isinstance(event, PolicySet)
    _state(ed).policy = event.policy


def reset_trial(ed: EventData) -> None:
    """An ended trial is queued again.

    As Ray's ``resume_errored``, the failure counters are kept and only the (unpersisted)
    restore episode is forgotten; as ``restart_errored`` (``from_scratch``), which builds a
    fresh ``Trial``, the checkpoints and the failure budgets start anew as well.
    """
    event = ed.kwargs["event"]
    assert isinstance(event, TrialReset)
    state = _state(ed)
    if event.from_scratch:
        state.checkpoints = ()
        state.failures = 0
        state.preemptions = 0
    state.restore_failures = 0
    state.restoring_from = None
    state.excluded_nodes = ()


def adopt_counters(ed: EventData) -> None:
    """The adopted failure counters replace the log's (its history was incomplete)."""
    event = ed.kwargs["event"]
    assert isinstance(event, CountersAdopted)
    state = _state(ed)
    state.failures = event.failures
    state.preemptions = event.preemptions


def recreate_trial(ed: EventData) -> None:
    """A new trial behind the id of an ended one: everything starts anew but the id."""
    event = ed.kwargs["event"]
    assert isinstance(event, TrialRecreated)
    state = _state(ed)
    state.failures = 0
    state.restore_failures = 0
    state.total_restore_failures = 0
    state.preemptions = 0
    state.checkpoints = ()
    state.restoring_from = None
    state.last_error = None
    state.last_decision = None
    state.last_failure_node = None
    state.excluded_nodes = ()
    state.unconfirmed_restore = None
    state.unconfirmed_restore_failures = 0
    state.user_restore_failed = False
    state.incarnation += 1


def drop_avoidance(ed: EventData) -> None:
    """The exclusion of failed nodes is dropped: the next attempt may run anywhere."""
    _state(ed).excluded_nodes = ()


def decide(decision: Decision) -> Effect:
    """Effect: record ``decision`` as the trial's last decision."""

    def effect(ed: EventData) -> None:
        _state(ed).last_decision = decision

    effect.__name__ = f"decide_{decision.value}"
    return effect


# ---------------------------------------------------------------- the transition table


def _fail_transitions() -> list[dict[str, Any]]:
    restoring = [Status.RESTORING]
    # Ray's _actor_failed sets a PENDING or PAUSED trial whose actor died to RUNNING and then
    # handles the failure like any other, so they follow the training rules.
    active = [Status.PENDING, Status.RUNNING, Status.PAUSED]
    within = [next_failure_within]
    restore_rules = [
        # While RESTORING, every failure follows the restore rules (as Ray's handle_error).
        dict(source=restoring, dest=Status.ERROR, conditions=[is_fatal],
             before=[record_error, count_failure, decide(Decision.GIVE_UP)]),
        dict(source=restoring, dest=Status.PENDING, conditions=[restore_retry_left,
                                                                failures_within],
             before=[record_error, count_restore_retry, exclude_failed_node,
                     decide(Decision.RETRY_RESTORE)]),
        # Ray counts the retry, then should_recover() still refuses a trial already past
        # max_failures (resumed with resume_errored, or the policy lowered since).
        dict(source=restoring, dest=Status.ERROR, conditions=[restore_retry_left],
             before=[record_error, count_restore_retry, decide(Decision.GIVE_UP)]),
        dict(source=restoring, dest=Status.PENDING,
             conditions=[*within, on_exhausted(ExhaustionAction.RETRY_CHECKPOINT)],
             before=[record_error, count_failure, count_exhausted_restore,
                     exclude_failed_node, decide(Decision.RECOVER)]),
        dict(source=restoring, dest=Status.PENDING,
             conditions=[*within, on_exhausted(ExhaustionAction.PREVIOUS_CHECKPOINT),
                         has_older_checkpoint],
             before=[record_error, count_failure, count_exhausted_restore,
                     drop_restoring_checkpoint, end_restore_episode,
                     decide(Decision.PREVIOUS_CHECKPOINT)]),
        # restart_from_scratch, and previous_checkpoint with no older checkpoint left.
        dict(source=restoring, dest=Status.PENDING, conditions=within,
             before=[record_error, count_failure, count_exhausted_restore,
                     discard_all_checkpoints, end_restore_episode,
                     decide(Decision.RESTART_FROM_SCRATCH)]),
        dict(source=restoring, dest=Status.ERROR,
             before=[record_error, count_failure, count_exhausted_restore,
                     decide(Decision.GIVE_UP)]),
    ]
    # The same rules for a failure of the user's own restore, after Ray's (RUNNING).
    user_restore = [
        dict(rule, source=[Status.RUNNING],
             conditions=[user_restore_failure, *rule.get("conditions", [])],
             before=[reopen_restore_episode, *rule["before"]])
        for rule in restore_rules
    ]
    rules: list[dict[str, Any]] = [
        *restore_rules,
        *user_restore,
        # Failures while starting or training.
        dict(source=active, dest=Status.ERROR, conditions=[is_fatal],
             before=[record_error, count_failure, decide(Decision.GIVE_UP)]),
        dict(source=active, dest=Status.PENDING,
             conditions=[uncounted_preemption, preemption_budget_left, failures_within],
             before=[record_error, count_preemption, decide(Decision.RECOVER_PREEMPTED)]),
        dict(source=active, dest=Status.ERROR, conditions=[uncounted_preemption],
             before=[record_error, count_preemption, decide(Decision.GIVE_UP)]),
        dict(source=active, dest=Status.PENDING, conditions=within,
             before=[record_error, count_failure, decide(Decision.RECOVER)]),
        dict(source=active, dest=Status.ERROR,
             before=[record_error, count_failure, decide(Decision.GIVE_UP)]),
    ]
    # A training failure confirms the restore before it (the failure was not in the restore).
    for rule in rules[len(restore_rules) + len(user_restore):]:
        rule["before"] = [close_user_restore, *rule["before"]]
    return rules


def transition_table() -> list[dict[str, Any]]:
    """Every transition of the trial state machine, in guard order, as ``transitions`` specs."""
    every = [Status.NEW, *LIVE, *ENDED]
    table: list[dict[str, Any]] = [
        dict(trigger="add", source=Status.NEW, dest=Status.PENDING),
        dict(trigger="start", source=Status.PENDING, dest=Status.RESTORING,
             conditions=[has_checkpoint], before=[continue_user_restore, begin_restore]),
        dict(trigger="start", source=Status.PENDING, dest=Status.RUNNING,
             before=[close_user_restore]),
        dict(trigger="restored", source=Status.RESTORING, dest=Status.RUNNING,
             before=[hold_unconfirmed_restore, end_restore_episode]),
        dict(trigger="first_result", source=every, dest=None,
             before=[close_user_restore]),
        dict(trigger="checkpoint", source=[*LIVE, Status.TERMINATED], dest=None,
             before=[add_checkpoint]),
        dict(trigger="pause", source=Status.RUNNING, dest=Status.PAUSED),
        # resume: a paused trial, or a live one that a driver restart (Tuner.restore) requeued
        dict(trigger="resume", source=[Status.PAUSED, Status.RUNNING, Status.RESTORING],
             dest=Status.PENDING),
        dict(trigger="complete", source=Status.RUNNING, dest=Status.TERMINATED),
        dict(trigger="stop", source=LIVE, dest=Status.TERMINATED),
        dict(trigger="reset", source=ENDED, dest=Status.PENDING,
             before=[reset_trial, close_user_restore]),
        dict(trigger="discard_checkpoints", source=every, dest=None, before=[forget_discarded]),
        dict(trigger="set_policy", source=every, dest=None, before=[set_policy]),
        dict(trigger="avoid_nodes", source=every, dest=None),
        dict(trigger="drop_avoidance", source=every, dest=None, before=[drop_avoidance]),
        dict(trigger="adopt_counters", source=[*LIVE, *ENDED], dest=None,
             before=[adopt_counters]),
        dict(trigger="recreate", source=ENDED, dest=Status.PENDING, before=[recreate_trial]),
        dict(trigger="note_rename", source=every, dest=None),
    ]
    table += [dict(trigger="fail", **spec) for spec in _fail_transitions()]
    return table


def build_machine() -> Machine:
    """Build the one shared ``transitions.Machine`` (no models registered)."""
    return Machine(
        model=None,
        states=Status,
        initial=Status.NEW,
        transitions=transition_table(),
        auto_transitions=False,
        send_event=True,
        ignore_invalid_triggers=False,
        model_attribute="status",
    )


#: The machine every trial is driven through.
MACHINE = build_machine()


def apply(
    state: TrialState, event: Event, policy: RetryPolicy | None = None
) -> TransitionRecord:
    """Fold one event into ``state`` (in place) and return what it did.

    ``policy`` overrides the policy in force (a what-if replay); by default the state's own
    policy, set by ``PolicySet`` events, applies. An event not valid in the current state
    raises :class:`InvalidTransitionError` and leaves ``state`` unchanged.
    """
    before = state.status
    trigger = MACHINE.events.get(event.trigger)
    if trigger is None:
        raise InvalidTransitionError(state.trial_id, before.value, event.type_name)
    try:
        fired = trigger.trigger(state, event=event, policy=policy or state.policy)
    except MachineError:
        fired = False
    if not fired:
        raise InvalidTransitionError(state.trial_id, before.value, event.type_name)
    state.seq += 1
    failed = isinstance(event, TrialFailed)
    return TransitionRecord(
        trial_id=state.trial_id,
        event=event.type_name,
        status_before=before,
        status_after=state.status,
        decision=state.last_decision if failed else None,
        counters=state.counters,
        error=event.error if isinstance(event, TrialFailed) else None,
    )


def fold(
    trial_id: str,
    events: Iterable[Event],
    policy: RetryPolicy | None = None,
    state: TrialState | None = None,
) -> tuple[TrialState, list[TransitionRecord]]:
    """Fold ``events`` from ``state`` (default: a new trial) and return the state and records."""
    current = state.copy() if state is not None else TrialState(trial_id)
    records = [apply(current, event, policy) for event in events]
    return current, records
