"""The trial state machine: named rules (guarded transitions, their effects), with transitions.

One :class:`transitions.Machine` is built once for all trials (``auto_transitions`` off, no
registered models) and drives plain :class:`TrialState` objects through
``machine.events[trigger].trigger(state, ...)``. Building it per trial, or registering every
trial with ``add_model``, costs far more and grows faster than linearly (measured by
``python -m benchmarks --section fold``, in ``benchmarks/fsm.py``).

Guards (:mod:`statemachine.domain.guards`) are evaluated in the order the transitions are
listed; the first whose conditions all hold fires, runs its effects
(:mod:`statemachine.domain.effects`, the ``before`` callbacks) and moves the trial to its
destination. Every transition is a named rule (:class:`~statemachine.domain.rules.Rule`), and
the record of an event carries the rule that fired. This Machine is the definition: the fold
that every other part runs is the table compiled from it
(:mod:`statemachine.domain.compiled`); :func:`apply` here triggers the Machine itself, for
``verify`` and the property test that proves both equal.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, NamedTuple, cast

from transitions import EventData, Machine, MachineError, Transition

from statemachine.domain.effects import (
    COUNTED,
    Effect,
    add_checkpoint,
    adopt_counters,
    begin_restore,
    close_user_restore,
    continue_user_restore,
    count_cause_retry,
    count_exhausted_restore,
    count_failure,
    count_preemption,
    count_restore_retry,
    decide,
    discard_all_checkpoints,
    drop_avoidance,
    drop_restoring_checkpoint,
    end_restore_episode,
    exclude_failed_node,
    forget_discarded,
    hold_unconfirmed_restore,
    record_error,
    recreate_trial,
    reopen_restore_episode,
    reset_trial,
    set_policy,
)
from statemachine.domain.events import Event, TrialFailed
from statemachine.domain.failures import TrialError
from statemachine.domain.guards import (
    cause_budget_left,
    cause_fatal,
    failures_within,
    has_checkpoint,
    has_older_checkpoint,
    is_fatal,
    next_failure_within,
    on_exhausted,
    preemption_budget_left,
    repeated_failure,
    restore_retry_left,
    uncounted_cause,
    uncounted_preemption,
    user_restore_failure,
)
from statemachine.domain.policy import ExhaustionAction, RetryPolicy
from statemachine.domain.rules import FailureNumbers, Rule, RuleName
from statemachine.domain.state import Counters, TrialState
from statemachine.domain.status import ENDED, LIVE, Decision, Status
from statemachine.exceptions import InvalidTransitionError

# transitions logs every callback at INFO; a fold of millions of events must not.
logging.getLogger("transitions").setLevel(logging.WARNING)

#: The revision of what a fold computes: the tag of the snapshots that are trusted. Raise it
#: with any change to the table, a guard, an effect, the fold loop or the state's encoding
#: that can change a fold's result (a state or a record) for some history; then record it
#: with ``UPDATE_GOLDEN=1 python -m pytest tests/domain/test_domain_machine_revision.py``.
#: That golden test fails when the machine changes and this number does not.
MACHINE_REVISION = 3


class TransitionRecord(NamedTuple):
    """What one event did to a trial: the answer to every ``apply``.

    An immutable named tuple (it is built once per recorded event: a tuple is several
    times cheaper to make than a frozen dataclass). ``rule`` is the transition of the
    machine that fired (derived as the event folds, never stored in the log);
    ``cause_retries``, for a failure whose rule retried its cause uncounted, that cause's
    uncounted retries after it (a counter of the state, not of :class:`Counters`).
    """

    trial_id: str
    event: str
    status_before: Status
    status_after: Status
    decision: Decision | None
    counters: Counters
    error: TrialError | None = None
    rule: Rule | None = None
    cause_retries: int | None = None

    def numbers(self) -> FailureNumbers:
        """The numbers of this failure: the counters the rule that fired incremented."""
        if self.rule is None:
            return FailureNumbers(None, None, None, None)
        return self.rule.numbers(self.counters, self.cause_retries)

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
            "rule": str(self.rule.name) if self.rule else None,
            "cause_retries": self.cause_retries,
        }


# ---------------------------------------------------------------- the transition table


def _restore_rules(restoring: list[Status]) -> list[dict[str, Any]]:
    """A failure of a restore (while RESTORING, every failure: as Ray's handle_error)."""
    within = [next_failure_within]
    exhausted = [record_error, count_failure, count_exhausted_restore]
    return [
        dict(rule=RuleName.RESTORE_FATAL, source=restoring, dest=Status.ERROR,
             conditions=[is_fatal], before=[record_error, count_failure, decide(Decision.GIVE_UP)]),
        dict(rule=RuleName.RESTORE_RETRY, source=restoring, dest=Status.PENDING,
             conditions=[restore_retry_left, failures_within],
             before=[record_error, count_restore_retry, exclude_failed_node,
                     decide(Decision.RETRY_RESTORE)]),
        # Ray counts the retry, then should_recover() still refuses a trial already past
        # max_failures (resumed with resume_errored, or the policy lowered since).
        dict(rule=RuleName.RESTORE_RETRY_REFUSED, source=restoring, dest=Status.ERROR,
             conditions=[restore_retry_left],
             before=[record_error, count_restore_retry, decide(Decision.GIVE_UP)]),
        dict(rule=RuleName.RESTORE_EXHAUSTED_RETRY_CHECKPOINT, source=restoring,
             dest=Status.PENDING,
             conditions=[*within, on_exhausted(ExhaustionAction.RETRY_CHECKPOINT)],
             before=[*exhausted, exclude_failed_node, decide(Decision.RECOVER)]),
        dict(rule=RuleName.RESTORE_EXHAUSTED_PREVIOUS_CHECKPOINT, source=restoring,
             dest=Status.PENDING,
             conditions=[*within, on_exhausted(ExhaustionAction.PREVIOUS_CHECKPOINT),
                         has_older_checkpoint],
             before=[*exhausted, drop_restoring_checkpoint, end_restore_episode,
                     decide(Decision.PREVIOUS_CHECKPOINT)]),
        # restart_from_scratch, and previous_checkpoint with no older checkpoint left.
        dict(rule=RuleName.RESTORE_EXHAUSTED_FROM_SCRATCH, source=restoring,
             dest=Status.PENDING, conditions=within,
             before=[*exhausted, discard_all_checkpoints, end_restore_episode,
                     decide(Decision.RESTART_FROM_SCRATCH)]),
        dict(rule=RuleName.RESTORE_EXHAUSTED_GIVE_UP, source=restoring, dest=Status.ERROR,
             before=[*exhausted, decide(Decision.GIVE_UP)]),
    ]


def _user_restore_rules() -> list[dict[str, Any]]:
    """The restore rules for a failure of the user's own restore, after Ray's (RUNNING): the
    episode held aside is reopened first, and the rules' guards read it."""
    return [
        dict(rule, conditions=[user_restore_failure, *rule.get("conditions", [])],
             before=[reopen_restore_episode, *rule["before"]])
        for rule in _restore_rules([Status.RUNNING])
    ]


def _training_rules() -> list[dict[str, Any]]:
    """A failure while starting or training. Ray's _actor_failed sets a PENDING or PAUSED
    trial whose actor died to RUNNING and then handles the failure like any other, so they
    follow the training rules. Each first confirms a restore held aside: the failure was
    not in the restore. The rules of a cause (``on_cause``) and of repeats
    (``give_up_on_repeats``) hold for no failure under Ray's own policy."""
    active = [Status.PENDING, Status.RUNNING, Status.PAUSED]
    give_up = [record_error, count_failure, decide(Decision.GIVE_UP)]
    rules: list[tuple[RuleName, Status, list[Any], list[Effect]]] = [
        (RuleName.FATAL, Status.ERROR, [is_fatal], give_up),
        (RuleName.CAUSE_FATAL, Status.ERROR, [cause_fatal], give_up),
        (RuleName.REPEATED, Status.ERROR, [repeated_failure], give_up),
        (RuleName.PREEMPTED_RECOVER, Status.PENDING,
         [uncounted_preemption, preemption_budget_left, failures_within],
         [record_error, count_preemption, decide(Decision.RECOVER_PREEMPTED)]),
        (RuleName.PREEMPTED_GIVE_UP, Status.ERROR, [uncounted_preemption],
         [record_error, count_preemption, decide(Decision.GIVE_UP)]),
        (RuleName.CAUSE_RECOVER, Status.PENDING,
         [uncounted_cause, cause_budget_left, failures_within],
         [record_error, count_cause_retry, decide(Decision.RECOVER_NOT_COUNTED)]),
        (RuleName.CAUSE_GIVE_UP, Status.ERROR, [uncounted_cause],
         [record_error, count_cause_retry, decide(Decision.GIVE_UP)]),
        (RuleName.RECOVER, Status.PENDING, [next_failure_within],
         [record_error, count_failure, decide(Decision.RECOVER)]),
        (RuleName.GIVE_UP, Status.ERROR, [],
         [record_error, count_failure, decide(Decision.GIVE_UP)]),
    ]
    return [dict(rule=name, source=active, dest=dest, conditions=conditions,
                 before=[close_user_restore, *effects])
            for name, dest, conditions, effects in rules]


def transition_table() -> list[dict[str, Any]]:
    """Every transition of the trial state machine, in guard order, as ``transitions`` specs.

    Each spec names its rule (``rule``: a :class:`RuleName`, or the trigger when the
    transition is alone on it).
    """
    every = [Status.NEW, *LIVE, *ENDED]
    table: list[dict[str, Any]] = [
        dict(trigger="add", source=Status.NEW, dest=Status.PENDING),
        dict(trigger="start", rule=RuleName.START_RESTORING, source=Status.PENDING,
             dest=Status.RESTORING, conditions=[has_checkpoint],
             before=[continue_user_restore, begin_restore]),
        dict(trigger="start", rule=RuleName.START_FRESH, source=Status.PENDING,
             dest=Status.RUNNING, before=[close_user_restore]),
        dict(trigger="restored", source=Status.RESTORING, dest=Status.RUNNING,
             before=[hold_unconfirmed_restore, end_restore_episode]),
        dict(trigger="first_result", source=every, dest=None, before=[close_user_restore]),
        dict(trigger="checkpoint", source=[*LIVE, Status.TERMINATED], dest=None,
             before=[add_checkpoint]),
        dict(trigger="pause", source=Status.RUNNING, dest=Status.PAUSED),
        # resume: a paused trial, or a live one that a driver restart (Tuner.restore) requeued
        dict(trigger="resume", source=[Status.PAUSED, Status.RUNNING, Status.RESTORING],
             dest=Status.PENDING),
        dict(trigger="complete", source=Status.RUNNING, dest=Status.TERMINATED),
        dict(trigger="stop", source=list(LIVE), dest=Status.TERMINATED),
        dict(trigger="reset", source=list(ENDED), dest=Status.PENDING,
             before=[reset_trial, close_user_restore]),
        dict(trigger="discard_checkpoints", source=every, dest=None, before=[forget_discarded]),
        dict(trigger="set_policy", source=every, dest=None, before=[set_policy]),
        dict(trigger="avoid_nodes", source=every, dest=None),
        dict(trigger="drop_avoidance", source=every, dest=None, before=[drop_avoidance]),
        dict(trigger="adopt_counters", source=[*LIVE, *ENDED], dest=None,
             before=[adopt_counters]),
        dict(trigger="recreate", source=list(ENDED), dest=Status.PENDING,
             before=[recreate_trial]),
        dict(trigger="note_rename", source=every, dest=None),
        # learn_cause: a record of a cause learned late; it changes nothing in the fold
        dict(trigger="learn_cause", source=every, dest=None),
        # advance_resume / keep_resume: what a new driver told Ray after a crash (issue 27);
        # the log already holds the checkpoints and the end, so nothing changes in the fold
        dict(trigger="advance_resume", source=every, dest=None),
        dict(trigger="keep_resume", source=every, dest=None),
    ]
    failures = [*_restore_rules([Status.RESTORING]), *_user_restore_rules(), *_training_rules()]
    table += [dict(trigger="fail", **spec) for spec in failures]
    for spec in table:
        spec.setdefault("rule", spec["trigger"])
    return table


class RuleTransition(Transition):
    """A ``transitions`` transition that knows its rule (built from its own callbacks)."""

    def __init__(self, source: str, dest: Any, conditions: Any = None, unless: Any = None,
                 before: Any = None, after: Any = None, prepare: Any = None, *,
                 rule: str) -> None:
        super().__init__(source, dest, conditions, unless, before, after, prepare)
        counts: dict[str, None] = {}
        for effect in self.before:
            counts.update(dict.fromkeys(COUNTED.get(cast(Effect, effect), ())))
        names = [getattr(c.func, "__name__", str(c.func)) for c in self.conditions]
        self.rule = Rule(
            rule,
            guards=tuple(name if c.target else f"not {name}"
                         for name, c in zip(names, self.conditions, strict=True)),
            counts=tuple(counts),
            user_restore=reopen_restore_episode in self.before,
        )


class TrialMachine(Machine):
    """The ``transitions`` Machine of trials: its transitions carry their rules."""

    transition_cls = RuleTransition


def _note_fired(ed: EventData) -> None:
    """After a trigger: hand the rule that fired to :func:`apply` (its first argument)."""
    if ed.result:
        (fired,) = ed.args
        fired.append(cast(RuleTransition, ed.transition).rule)


def build_machine() -> TrialMachine:
    """Build the one shared ``transitions.Machine`` (no models registered)."""
    return TrialMachine(
        model=None,
        states=Status,
        initial=Status.NEW,
        transitions=transition_table(),
        auto_transitions=False,
        send_event=True,
        ignore_invalid_triggers=False,
        model_attribute="status",
        finalize_event=[_note_fired],
    )


#: The machine every trial is driven through.
MACHINE = build_machine()


def apply(
    state: TrialState, event: Event, policy: RetryPolicy | None = None
) -> TransitionRecord:
    """Fold one event into ``state`` (in place) through the Machine itself; what it did.

    ``policy`` overrides the policy in force (a what-if replay); by default the state's own
    policy, set by ``PolicySet`` events, applies. An event not valid in the current state
    raises :class:`InvalidTransitionError` and leaves ``state`` unchanged.
    """
    before = state.status
    trigger = MACHINE.events.get(event.trigger)
    if trigger is None:
        raise InvalidTransitionError(state.trial_id, before.value, event.type_name)
    fired: list[Rule] = []
    try:
        trigger.trigger(state, fired, event=event, policy=policy or state.policy)
    except MachineError:
        pass
    if not fired:
        raise InvalidTransitionError(state.trial_id, before.value, event.type_name)
    state.seq += 1
    failed = event if isinstance(event, TrialFailed) else None
    rule = fired[0]
    return TransitionRecord(
        trial_id=state.trial_id,
        event=event.type_name,
        status_before=before,
        status_after=state.status,
        decision=state.last_decision if failed else None,
        counters=state.counters,
        error=failed.error if failed else None,
        rule=rule,
        cause_retries=cause_retries_of(state, failed, rule),
    )


def cause_retries_of(state: TrialState, failed: TrialFailed | None, rule: Rule) -> int | None:
    """The uncounted retries of a failure's cause after it, when its rule counted one."""
    if failed is None or "cause_retries" not in rule.counts:
        return None
    death = getattr(failed.error, "death", None)
    return state.cause_retry_count(death.cause.value) if death is not None else None


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
