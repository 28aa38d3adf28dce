"""The rules of the machine by name, what a fired rule counted, and the predicates read outside it.

Every transition of :mod:`statemachine.domain.machine` is a named rule; the
:class:`~statemachine.domain.machine.TransitionRecord` of an event carries the :class:`Rule`
that fired (its name, the guards that held and the counters it incremented), read from the
``transitions`` Machine itself. Whoever explains a decision (``trial-replay explain``, the
trial's ``error.txt``, the web page) reads that rule and the record's counters, never the
guards again: :meth:`Rule.numbers` is the one numbering of failures.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

from statemachine.domain.policy import RestorePhase, RetryPolicy
from statemachine.domain.state import Counters, TrialState
from statemachine.domain.status import Status


class RuleName(str, Enum):
    """The rules a start or a failure can fire (other transitions are named by their trigger)."""

    START_RESTORING = "start_restoring"
    """A start with a checkpoint to restore from."""
    START_FRESH = "start_fresh"
    """A start with no checkpoint: training from scratch."""
    RESTORE_FATAL = "restore_fatal"
    """A failure while restoring that is not retryable: GIVE_UP."""
    RESTORE_RETRY = "restore_retry"
    """A restore failure within ``restore_retry_num`` and ``max_failures``: RETRY_RESTORE."""
    RESTORE_RETRY_REFUSED = "restore_retry_refused"
    """A restore retry was left, but the trial is past ``max_failures`` already: GIVE_UP."""
    RESTORE_EXHAUSTED_RETRY_CHECKPOINT = "restore_exhausted_retry_checkpoint"
    """The restore retries are spent, the failure is counted: RECOVER (Ray 2.x)."""
    RESTORE_EXHAUSTED_PREVIOUS_CHECKPOINT = "restore_exhausted_previous_checkpoint"
    """The restore retries are spent, the failure is counted: PREVIOUS_CHECKPOINT."""
    RESTORE_EXHAUSTED_FROM_SCRATCH = "restore_exhausted_from_scratch"
    """The restore retries are spent, the failure is counted: RESTART_FROM_SCRATCH."""
    RESTORE_EXHAUSTED_GIVE_UP = "restore_exhausted_give_up"
    """The restore retries are spent and so is ``max_failures``: GIVE_UP."""
    FATAL = "fatal"
    """A failure while starting or training that is not retryable: GIVE_UP."""
    CAUSE_FATAL = "cause_fatal"
    """An actor death whose cause the policy does not retry (``on_cause`` give_up): GIVE_UP."""
    REPEATED = "repeated"
    """The same failure at the same training iteration ``give_up_on_repeats`` times in a
    row: GIVE_UP."""
    PREEMPTED_RECOVER = "preempted_recover"
    """An uncounted preemption within its budget: RECOVER_PREEMPTED."""
    PREEMPTED_GIVE_UP = "preempted_give_up"
    """An uncounted preemption past its budget (or ``max_failures``): GIVE_UP."""
    CAUSE_RECOVER = "cause_recover"
    """An actor death whose cause is retried uncounted (``on_cause`` retry_not_counted),
    within the cause's budget: RECOVER_NOT_COUNTED."""
    CAUSE_GIVE_UP = "cause_give_up"
    """An actor death whose cause is retried uncounted, past its budget (or
    ``max_failures``): GIVE_UP."""
    RECOVER = "recover"
    """A counted failure within ``max_failures``: RECOVER."""
    GIVE_UP = "give_up"
    """A counted failure past ``max_failures``: GIVE_UP."""

    def __str__(self) -> str:
        return self.value


class FailureNumbers(NamedTuple):
    """The numbers a failure gets, each a counter of its record (``None``: not counted).

    ``restore_failure`` is the trial's restore failures over its life (``show``'s total),
    ``retry`` the restore failures of the current episode (Ray's ``num_restore_failures``,
    "retry k of ``restore_retry_num``"), ``failure`` Ray's ``num_failures``, ``preemption``
    the preemptions not counted as failures, ``cause_retry`` the failures of this failure's
    cause retried without counting them (``on_cause`` retry_not_counted).
    """

    restore_failure: int | None
    retry: int | None
    failure: int | None
    preemption: int | None
    cause_retry: int | None = None


@dataclass(frozen=True, eq=False, slots=True)
class Rule:
    """A transition of the machine: its name, its guards and the counters it increments.

    Built from the ``transitions`` Machine's own transition (one per source status); a record
    carries the very object that fired, so two rules are equal only when they are the same.

    Attributes:
        name: a :class:`RuleName`, or the trigger for a transition that is alone on it.
        guards: the guards that held, in order (``not g`` for an ``unless``).
        counts: the counters it incremented, by :class:`~statemachine.domain.state.Counters`
            field name (the budgets it consumed), and ``cause_retries`` for the retries of
            the failure's cause not counted as failures (a counter of the state, per cause).
        user_restore: it continues the restore that Ray had called done (a failure of the
            trainable's own load: ``restoring()``, or ``restore_phase="until_first_report"``).
    """

    name: str
    guards: tuple[str, ...]
    counts: tuple[str, ...]
    user_restore: bool = False

    def numbers(self, counters: Counters, cause_retries: int | None = None) -> FailureNumbers:
        """The failure's numbers: each counter this rule incremented, read from ``counters``
        (and ``cause_retries``, the failure's cause's uncounted retries after it)."""
        counts = self.counts
        return FailureNumbers(
            counters.total_restore_failures if "total_restore_failures" in counts else None,
            counters.restore_failures if "restore_failures" in counts else None,
            counters.failures if "failures" in counts else None,
            counters.preemptions if "preemptions" in counts else None,
            cause_retries if "cause_retries" in counts else None,
        )

    def __repr__(self) -> str:
        return f"Rule({self.name!s}, guards={self.guards}, counts={self.counts})"


#: The rules a restore failure fires (also of the user's own restore: ``Rule.user_restore``).
RESTORE_RULES = frozenset({
    RuleName.RESTORE_RETRY, RuleName.RESTORE_RETRY_REFUSED,
    RuleName.RESTORE_EXHAUSTED_RETRY_CHECKPOINT, RuleName.RESTORE_EXHAUSTED_PREVIOUS_CHECKPOINT,
    RuleName.RESTORE_EXHAUSTED_FROM_SCRATCH, RuleName.RESTORE_EXHAUSTED_GIVE_UP,
})  # fmt: skip


#: The rules that decide a failure by the cause of its actor's death (``on_cause``), with
#: the preemption rules (``preempted``'s entry of the same model).
CAUSE_RULES = frozenset({
    RuleName.CAUSE_FATAL, RuleName.CAUSE_RECOVER, RuleName.CAUSE_GIVE_UP,
    RuleName.PREEMPTED_RECOVER, RuleName.PREEMPTED_GIVE_UP,
})  # fmt: skip


def restore_unconfirmed(state: TrialState) -> bool:
    """The attempt was restored by Ray and has reported no result yet (the episode is held)."""
    return state.status is Status.RUNNING and state.unconfirmed_restore is not None


def failure_in_restore(state: TrialState, policy: RetryPolicy) -> bool:
    """A failure now is one of the restore, whatever it is (``until_first_report``).

    The Ray adapter then classifies it as raised while ``RESTORING``; with ``restore_phase``
    ``"ray"`` only a :class:`~statemachine.domain.failures.RestoreError` raised by
    ``restoring()`` continues the restore (the machine's ``user_restore_failure`` guard).
    """
    return restore_unconfirmed(state) and policy.restore_phase is RestorePhase.UNTIL_FIRST_REPORT
