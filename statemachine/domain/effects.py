"""The effects of the trial state machine's transitions: how a fired rule changes the state.

Each mutates only the trial state it is given (``ed.model``); no I/O, no clock, no
randomness. :data:`COUNTED` names the failure counters each counting effect increments: a
rule's budgets (:attr:`statemachine.domain.rules.Rule.counts`) are read from its effects.
"""

from __future__ import annotations

from collections.abc import Callable

from transitions import EventData

from statemachine.domain.events import (
    CheckpointSaved,
    CheckpointsDiscarded,
    CountersAdopted,
    PolicySet,
    TrialFailed,
    TrialRecreated,
    TrialReset,
    TrialStarted,
)
from statemachine.domain.failures import ActorError
from statemachine.domain.guards import policy_of, repeats_with, state_of
from statemachine.domain.policy import RestorePhase
from statemachine.domain.state import CHECKPOINT_HISTORY, TrialState
from statemachine.domain.status import Decision

Effect = Callable[[EventData], None]


def _restore_target(ed: EventData, state: TrialState) -> str | None:
    """The checkpoint a start restores from: the one the event names, else the latest."""
    event = ed.kwargs["event"]
    named = event.restore_from if isinstance(event, TrialStarted) else None
    return named or state.latest_checkpoint


def record_error(ed: EventData) -> None:
    """Remember the failure as the trial's last error: where and at which training iteration
    it happened, and how many failures in a row it repeats."""
    state = state_of(ed)
    event = ed.kwargs["event"]
    assert isinstance(event, TrialFailed)
    state.repeats = repeats_with(state, event)
    state.last_error = event.error
    state.last_failure_node = event.node
    state.last_failure_iteration = event.iteration


def count_failure(ed: EventData) -> None:
    """One more failure against ``max_failures``."""
    state_of(ed).failures += 1


def count_restore_retry(ed: EventData) -> None:
    """One more restore failure in this episode (a retry, not a failure)."""
    state = state_of(ed)
    state.restore_failures += 1
    state.total_restore_failures += 1


def count_exhausted_restore(ed: EventData) -> None:
    """A restore failure past the retries: counted in the total only (Ray keeps the episode)."""
    state_of(ed).total_restore_failures += 1


def exclude_failed_node(ed: EventData) -> None:
    """With ``avoid_failed_nodes``, the episode's next attempt avoids the node that failed.

    Only a node whose id is known is excluded; with the default policy nothing changes.
    """
    if not policy_of(ed).avoid_failed_nodes:
        return
    node = ed.kwargs["event"].node
    state = state_of(ed)
    if node is not None and node.node_id and node.node_id not in state.excluded_nodes:
        state.excluded_nodes = (*state.excluded_nodes, node.node_id)


def count_preemption(ed: EventData) -> None:
    """One more uncounted preemption."""
    state_of(ed).preemptions += 1


def count_cause_retry(ed: EventData) -> None:
    """One more failure of this actor death's cause retried without counting it."""
    error = ed.kwargs["event"].error
    assert isinstance(error, ActorError)
    state = state_of(ed)
    cause = error.death.cause.value
    counts = dict(state.cause_retries)
    counts[cause] = counts.get(cause, 0) + 1
    state.cause_retries = tuple(sorted(counts.items()))


def begin_restore(ed: EventData) -> None:
    """A restore episode refers to the checkpoint named by the start event, or the latest.

    Restoring from another checkpoint than the episode's (a driver restarted with an older
    experiment snapshot) starts a new episode: the restore counter refers to one checkpoint.
    """
    state = state_of(ed)
    target = _restore_target(ed, state)
    if state.restoring_from is not None and target != state.restoring_from:
        state.restore_failures = 0
        state.excluded_nodes = ()
    state.restoring_from = target


def end_restore_episode(ed: EventData) -> None:
    """The restore episode is over: its counter goes back to 0, no node is avoided."""
    state = state_of(ed)
    state.restore_failures = 0
    state.restoring_from = None
    state.excluded_nodes = ()


def hold_unconfirmed_restore(ed: EventData) -> None:
    """Ray's restore returned: keep its episode until the attempt's first result.

    Ray ends the episode here (its counter goes back to 0, as the fold's does); a function
    trainable loads its checkpoint only afterwards, in the user's code, so the episode is kept
    aside for a failure of that load.
    """
    state = state_of(ed)
    state.unconfirmed_restore = state.restoring_from or state.latest_checkpoint
    state.unconfirmed_restore_failures = state.restore_failures


def reopen_restore_episode(ed: EventData) -> None:
    """A failure of the user's restore continues the episode held aside."""
    state = state_of(ed)
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
    state = state_of(ed)
    held = state.unconfirmed_restore
    state.unconfirmed_restore = None
    if held is None:
        return
    target = _restore_target(ed, state)
    users = (state.user_restore_failed
             or policy_of(ed).restore_phase is RestorePhase.UNTIL_FIRST_REPORT)
    if users and target == held and state.restoring_from is None:
        state.restoring_from = held
        state.restore_failures = state.unconfirmed_restore_failures
    else:
        state.user_restore_failed = False
    state.unconfirmed_restore_failures = 0


def close_user_restore(ed: EventData) -> None:
    """The restore is confirmed (a result came, or a failure outside the restore), or the
    trial starts without one: nothing is held aside any more."""
    state = state_of(ed)
    state.unconfirmed_restore = None
    state.unconfirmed_restore_failures = 0
    state.user_restore_failed = False


def discard_all_checkpoints(ed: EventData) -> None:
    """Forget every checkpoint: the trial starts from scratch."""
    state_of(ed).checkpoints = ()


def drop_restoring_checkpoint(ed: EventData) -> None:
    """Forget the checkpoint that failed to restore and every newer one (none if unknown)."""
    state = state_of(ed)
    current = state.restoring_from or state.latest_checkpoint
    if current in state.checkpoints:
        state.checkpoints = state.checkpoints[: state.checkpoints.index(current)]


def add_checkpoint(ed: EventData) -> None:
    """Remember a new checkpoint as the latest."""
    event = ed.kwargs["event"]
    assert isinstance(event, CheckpointSaved)
    state = state_of(ed)
    kept = state.checkpoints
    if event.checkpoint in kept:  # saved again: it moves to the end (the scan only then)
        kept = tuple(c for c in kept if c != event.checkpoint)
    state.checkpoints = (*kept, event.checkpoint)[-CHECKPOINT_HISTORY:]


def forget_discarded(ed: EventData) -> None:
    """Forget the checkpoints named by a ``CheckpointsDiscarded`` event."""
    event = ed.kwargs["event"]
    assert isinstance(event, CheckpointsDiscarded)
    gone = set(event.checkpoints)
    state = state_of(ed)
    state.checkpoints = tuple(c for c in state.checkpoints if c not in gone)


def set_policy(ed: EventData) -> None:
    """The policy of a ``PolicySet`` event is in force from now on."""
    event = ed.kwargs["event"]
    assert isinstance(event, PolicySet)
    state_of(ed).policy = event.policy


def reset_trial(ed: EventData) -> None:
    """An ended trial is queued again.

    As Ray's ``resume_errored``, the failure counters are kept (the failures in a row too:
    the same failure again is one more) and only the (unpersisted) restore episode is
    forgotten; as ``restart_errored`` (``from_scratch``), which builds a fresh ``Trial``, the
    checkpoints and the failure budgets start anew as well.
    """
    event = ed.kwargs["event"]
    assert isinstance(event, TrialReset)
    state = state_of(ed)
    if event.from_scratch:
        state.checkpoints = ()
        state.failures = 0
        state.preemptions = 0
        state.cause_retries = ()
        state.repeats = 0
    state.restore_failures = 0
    state.restoring_from = None
    state.excluded_nodes = ()


def adopt_counters(ed: EventData) -> None:
    """The adopted failure counters replace the log's (its history was incomplete)."""
    event = ed.kwargs["event"]
    assert isinstance(event, CountersAdopted)
    state = state_of(ed)
    state.failures = event.failures
    state.preemptions = event.preemptions


def recreate_trial(ed: EventData) -> None:
    """A new trial behind the id of an ended one: everything starts anew but the id."""
    event = ed.kwargs["event"]
    assert isinstance(event, TrialRecreated)
    state = state_of(ed)
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
    state.cause_retries = ()
    state.repeats = 0
    state.last_failure_iteration = None
    state.incarnation += 1


def drop_avoidance(ed: EventData) -> None:
    """The exclusion of failed nodes is dropped: the next attempt may run anywhere."""
    state_of(ed).excluded_nodes = ()


def decide(decision: Decision) -> Effect:
    """Effect: record ``decision`` as the trial's last decision."""

    def effect(ed: EventData) -> None:
        state_of(ed).last_decision = decision

    effect.__name__ = f"decide_{decision.value}"
    return effect


#: The counters (``Counters`` field names) each counting effect increments by one.
COUNTED: dict[Effect, tuple[str, ...]] = {
    count_failure: ("failures",),
    count_restore_retry: ("restore_failures", "total_restore_failures"),
    count_exhausted_restore: ("total_restore_failures",),
    count_preemption: ("preemptions",),
    count_cause_retry: ("cause_retries",),
}
