"""The guards of the trial state machine: pure predicates over the event being folded.

Each reads the ``transitions`` ``EventData`` a fold passes (``ed.model``: the trial state,
``ed.kwargs``: the event and the policy in force) and changes nothing. They are named in the
rules a record carries (:attr:`statemachine.domain.rules.Rule.guards`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import cast

from transitions import EventData

from statemachine.domain.death import DeathCause
from statemachine.domain.events import TrialFailed, TrialStarted
from statemachine.domain.failures import ActorError, RestoreError, TrialError
from statemachine.domain.policy import CauseAction, ExhaustionAction, RestorePhase, RetryPolicy
from statemachine.domain.state import TrialState
from statemachine.domain.status import Status

Guard = Callable[[EventData], bool]


#: The trial state an event folds into (``ed.model``; read in C, for every guard and effect).
state_of = cast("Callable[[EventData], TrialState]", operator.attrgetter("model"))


def policy_of(ed: EventData) -> RetryPolicy:
    """The policy the event folds under (the trial's in force, or a what-if's)."""
    return ed.kwargs["policy"]  # type: ignore[no-any-return]


def error_of(ed: EventData) -> TrialError:
    """The failure of a ``TrialFailed`` event."""
    event = ed.kwargs["event"]
    assert isinstance(event, TrialFailed)
    return event.error


def has_checkpoint(ed: EventData) -> bool:
    """The trial has a checkpoint to restore from (known, or named by the start event)."""
    event = ed.kwargs["event"]
    restore_from = event.restore_from if isinstance(event, TrialStarted) else None
    return restore_from is not None or state_of(ed).latest_checkpoint is not None


def is_fatal(ed: EventData) -> bool:
    """The failure is an ``AbortError`` or its cause type is listed as fatal by the policy."""
    error = error_of(ed)
    return not error.retryable or policy_of(ed).is_fatal(error.cause_type)


def _episode(state: TrialState) -> tuple[str | None, int]:
    """The restore episode a failure belongs to: ``(checkpoint, restore failures)``.

    While RUNNING with an unconfirmed restore (see :func:`user_restore_failure`) that is the
    episode Ray closed when its own restore returned; otherwise the current one.
    """
    # rules.restore_unconfirmed(state), inlined: guards run for every failure, up to 7 times
    if state.status is Status.RUNNING and state.unconfirmed_restore is not None:
        return state.unconfirmed_restore, state.unconfirmed_restore_failures
    return state.restoring_from, state.restore_failures


def restore_retry_left(ed: EventData) -> bool:
    """Restore failures in this episode are still below ``restore_retry_num``."""
    return _episode(state_of(ed))[1] < policy_of(ed).restore_retry_num


def user_restore_failure(ed: EventData) -> bool:
    """A failure while RUNNING that belongs to the restore Ray already called succeeded.

    The attempt started from a checkpoint and has reported no result yet
    (:func:`~statemachine.domain.rules.restore_unconfirmed`), and either the user's code
    marked its own restore (a ``RestoreError`` raised by ``statemachine.tune.restoring()``)
    or the policy's ``restore_phase`` is ``until_first_report``
    (:func:`~statemachine.domain.rules.failure_in_restore`, which the Ray adapter reads).
    Those predicates, inlined: this guard heads seven rules, so a training failure tries it
    seven times (a property test holds it equal to them).
    """
    return state_of(ed).unconfirmed_restore is not None and (
        isinstance(error_of(ed), RestoreError)
        or policy_of(ed).restore_phase is RestorePhase.UNTIL_FIRST_REPORT)


def next_failure_within(ed: EventData) -> bool:
    """Counting this failure keeps the trial within ``max_failures`` (Ray's should_recover)."""
    return policy_of(ed).within_max_failures(state_of(ed).failures + 1)


def failures_within(ed: EventData) -> bool:
    """The failures counted so far are within ``max_failures``."""
    return policy_of(ed).within_max_failures(state_of(ed).failures)


def cause_of(error: TrialError) -> DeathCause | None:
    """The cause of an actor's death (``None``: the failure is not an actor death)."""
    return error.death.cause if isinstance(error, ActorError) else None


def cause_fatal(ed: EventData) -> bool:
    """An actor death whose cause the policy does not retry (``on_cause`` give_up)."""
    cause = cause_of(error_of(ed))
    return cause is not None and policy_of(ed).cause_action(cause) is CauseAction.GIVE_UP


def repeats_with(state: TrialState, event: TrialFailed) -> int:
    """How many failures in a row ``event``'s failure makes: the same kind, type and message
    at the same training iteration as the trial's last failure add one, another failure
    starts again at 1, and a failure whose iteration was not recorded is no repeat (0)."""
    error, last = event.error, state.last_error
    if event.iteration is None:
        return 0
    if (
        last is None
        or state.last_failure_iteration != event.iteration
        or last.kind != error.kind
        or last.cause_type != error.cause_type
        or last.message != error.message
    ):
        return 1
    return state.repeats + 1


def repeated_failure(ed: EventData) -> bool:
    """The failure repeats the last one for the ``give_up_on_repeats``-th time in a row."""
    limit = policy_of(ed).give_up_on_repeats
    return limit is not None and repeats_with(state_of(ed), ed.kwargs["event"]) >= limit


def uncounted_preemption(ed: EventData) -> bool:
    """A preempted actor, and the policy retries preemptions without counting them (the
    default unless ``count_preemption_as_failure``; ``on_cause`` may say otherwise)."""
    return cause_of(error_of(ed)) is DeathCause.PREEMPTED and policy_of(ed).cause_action(
        DeathCause.PREEMPTED) is CauseAction.RETRY_NOT_COUNTED


def uncounted_cause(ed: EventData) -> bool:
    """An actor death of another cause than preemption, which the policy retries without
    counting it (``on_cause`` retry_not_counted)."""
    cause = cause_of(error_of(ed))
    return (cause is not None and cause is not DeathCause.PREEMPTED
            and policy_of(ed).cause_action(cause) is CauseAction.RETRY_NOT_COUNTED)


def cause_budget_left(ed: EventData) -> bool:
    """The cause's own budget (``cause_budgets``, if any) allows one more uncounted retry."""
    error = error_of(ed)
    assert isinstance(error, ActorError)
    limit = policy_of(ed).cause_budget(error.death.cause)
    return limit is None or state_of(ed).cause_retry_count(error.death.cause.value) + 1 <= limit


def preemption_budget_left(ed: EventData) -> bool:
    """The separate preemption budget (if any) allows one more preemption."""
    limit = policy_of(ed).max_preemptions
    return limit is None or state_of(ed).preemptions + 1 <= limit


def on_exhausted(action: ExhaustionAction) -> Guard:
    """Guard: the policy's exhaustion action is ``action``."""

    def guard(ed: EventData) -> bool:
        return policy_of(ed).on_restore_exhausted is action

    guard.__name__ = f"on_exhausted_{action.value}"
    return guard


def has_older_checkpoint(ed: EventData) -> bool:
    """There is a known checkpoint to fall back to, other than the one that failed.

    That is one older than the checkpoint being restored, or any known checkpoint when the
    one being restored is not among them (named by the start event, or discarded since).
    """
    state = state_of(ed)
    current = _episode(state)[0] or state.latest_checkpoint
    if current not in state.checkpoints:
        return bool(state.checkpoints)
    return state.checkpoints.index(current) > 0
