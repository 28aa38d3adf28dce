"""The words for one folded event of a trial: what it did, read from its transition record.

A failure is worded from the rule that fired (:attr:`TransitionRecord.rule`) and the numbers
it counted (:meth:`TransitionRecord.numbers`: the one numbering of failures, the same
``error.txt`` uses); nothing here decides again what the machine decided.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from statemachine.cli.checkpoint_words import checkpoint_name as _checkpoint
from statemachine.cli.checkpoint_words import saved_words
from statemachine.cli.policy_words import describe_policy
from statemachine.domain.death import DeathCause
from statemachine.domain.events import (
    CheckpointSaved,
    CheckpointsDiscarded,
    CountersAdopted,
    DeathCauseLearned,
    Event,
    ExperimentRenamed,
    FirstResult,
    NodeAvoidanceDropped,
    NodesAvoided,
    PolicySet,
    RestoreSucceeded,
    ResumeAdvanced,
    ResumeNotAdvanced,
    TrialAdded,
    TrialCompleted,
    TrialFailed,
    TrialPaused,
    TrialRecreated,
    TrialReset,
    TrialResumed,
    TrialStarted,
    TrialStopped,
)
from statemachine.domain.failures import ActorError, RestoreError, TrialError
from statemachine.domain.machine import TransitionRecord
from statemachine.domain.nodes import NodeRef, short_node_id
from statemachine.domain.policy import RestorePhase, RetryPolicy
from statemachine.domain.rules import RESTORE_RULES, RuleName, restore_unconfirmed
from statemachine.domain.state import TrialState
from statemachine.domain.status import Decision, Status


class Located(Protocol):
    """Where an event sits in the log (the columns of a stored event explain reads)."""

    @property
    def position(self) -> int: ...

    @property
    def seq(self) -> int: ...

    @property
    def epoch(self) -> int: ...

    @property
    def recorded_at(self) -> datetime: ...


@dataclass(frozen=True)
class Folded:
    """One event of a trial as the fold went: the states around it and its record.

    ``user_load_fails``: for a ``RestoreSucceeded``, whether the restore it closed is
    reopened by a failure of the trainable's own load (a later record's rule says so).
    """

    where: Located | None
    event: Event
    before: TrialState
    after: TrialState
    record: TransitionRecord
    user_load_fails: bool = False


def _on(node: NodeRef | None) -> str:
    """`` on node 10.0.0.7 (node-id 3f2a...)``, or nothing when the node is not known."""
    return f" on {node.describe()}" if node is not None and node.known else ""


def _node_ids(ids: Sequence[str]) -> str:
    return ", ".join(f"node-id {short_node_id(i)}" for i in ids) or "none"


_DROPPED = {
    "no_other_node": "no other node could host it; the retry may run on the same node again",
    "timeout": "no other node could host it in time; the retry may run on the same node again",
    "unsupported": "the installed Ray cannot place by node label; the retry runs where Ray "
                   "puts it",
}


def _budget(failures: int | None, policy: RetryPolicy) -> str:
    if policy.max_failures < 0:
        return f"failure {failures} (max_failures unlimited)"
    return f"failure {failures} of max_failures {policy.max_failures}"


def _cause(event: TrialFailed) -> str:
    error = event.error
    message = f": {error.message}" if error.message else ""
    return f"{_kind(error)} ({error.cause_type}{message})"


def _kind(error: TrialError) -> str:
    """``ActorError, node died (unexpected termination: health check failed)``: an actor
    failure with why its actor died (a bare preemption says nothing more than its number)."""
    if not isinstance(error, ActorError):
        return error.kind
    death = error.death
    if death.cause is DeathCause.PREEMPTED and not (death.ray_reason or death.node_message):
        return error.kind
    return f"{error.kind}, {death.describe()}"


# ---------------------------------------------------------------- a failure


def _failure_head(f: Folded, event: TrialFailed) -> str:
    """What failed and its numbers."""
    name, numbers = f.record.rule.name if f.record.rule else "", f.record.numbers()
    where, cause, retries = _on(event.node), _cause(event), f.after.policy.restore_retry_num
    if name == RuleName.RESTORE_FATAL:
        return f"Not retryable while restoring{where}: {cause}."
    if name == RuleName.FATAL:
        return f"Not retryable{where}: {cause}."
    if name in RESTORE_RULES:
        retry = f"retry {numbers.retry} of {retries}"
        detail = {
            RuleName.RESTORE_RETRY: retry,
            RuleName.RESTORE_RETRY_REFUSED: f"{retry} refused: failures already exceed "
                                            "max_failures",
        }.get(RuleName(name), f"restore retries spent: {retries} of {retries}")
        return f"Restore failure # {numbers.restore_failure}{where} ({detail}): {cause}."
    if numbers.preemption is not None:
        return f"Preemption # {numbers.preemption}{where}: {cause}."
    if numbers.cause_retry is not None:
        return (f"Uncounted {_cause_name(event.error)} # {numbers.cause_retry}{where}: "
                f"{cause}.")
    error = event.error
    if name == RuleName.CAUSE_FATAL:
        return f"Actor died{where}, a cause the policy does not retry: {cause}."
    if isinstance(error, RestoreError):
        return (f"Failure inside restoring(){where} with no restore to retry (no checkpoint "
                f"restored, or after the attempt's first result): {cause}; counted as a "
                "training failure.")
    if isinstance(error, ActorError) and error.preempted:
        return f"Preemption{where}, counted as a failure: {cause}."
    if isinstance(error, ActorError):
        return f"Actor died{where}: {cause}."
    head = f"Training failure{where}: {cause}."
    if restore_unconfirmed(f.before):
        head += (" It came after Ray's restore and before the attempt's first result: if it "
                 "is the trainable's own load of its checkpoint, restoring() or "
                 "restore_phase=until_first_report makes it a restore failure.")
    return head


def _give_up_why(f: Folded) -> str:
    name, numbers, policy = f.record.rule.name if f.record.rule else "", f.record.numbers(), \
        f.after.policy
    if name == RuleName.RESTORE_RETRY_REFUSED:
        return (f"the restore retry was refused because failures ({f.before.failures}) "
                f"already exceed max_failures {policy.max_failures} (a restore retry is "
                "granted only within max_failures, as Ray does)")
    if name in (RuleName.FATAL, RuleName.RESTORE_FATAL):
        return f"the failure is not retryable (counted as {_budget(numbers.failure, policy)})"
    if name == RuleName.PREEMPTED_GIVE_UP:
        return (f"the preemption budget or failure budget is spent ({numbers.preemption} "
                "preemptions)")
    if name == RuleName.CAUSE_FATAL:
        cause = _cause_name(f.record.error)
        return (f"{cause} is not retried, rule {cause} (on_cause {cause}=give_up; counted as "
                f"{_budget(numbers.failure, policy)})")
    if name == RuleName.CAUSE_GIVE_UP:
        cause = _cause_name(f.record.error)
        budget = policy.cause_budgets.get(cause)
        spent = f"its budget of {budget}" if budget is not None else "no budget"
        return (f"not counted, rule {cause} (on_cause {cause}=retry_not_counted, {spent}), "
                f"but the {cause} budget or the failure budget is spent "
                f"({f.before.failures} failures, max_failures {policy.max_failures})")
    if name == RuleName.REPEATED:
        error = f.record.error
        assert error is not None
        at = f.after.last_failure_iteration
        return (f"the same failure ({error.cause_type}: {error.message}) at iteration {at}, "
                f"{f.after.repeats} times in a row, is not worth a retry "
                f"(give_up_on_repeats={policy.give_up_on_repeats}; counted as "
                f"{_budget(numbers.failure, policy)})")
    why = f"failure {numbers.failure} exceeds max_failures {policy.max_failures}"
    if name in RESTORE_RULES:
        why = f"the restore retries are spent and {why}"
    return why


def _failure_tail(f: Folded) -> str:
    """The decision and what it counted."""
    after, numbers, policy = f.after, f.record.numbers(), f.after.policy
    latest = _checkpoint(after.latest_checkpoint)
    tail = {
        Decision.RETRY_RESTORE: lambda: (
            "Decision RETRY_RESTORE: restore again from "
            f"{_checkpoint(after.restoring_from or after.latest_checkpoint)}; not counted as "
            f"a failure (failures stay at {after.failures})."),
        Decision.RECOVER_PREEMPTED: lambda: (
            f"Decision RECOVER_PREEMPTED: not counted as a failure (preemptions "
            f"{numbers.preemption}); start again from {latest}."),
        Decision.RECOVER_NOT_COUNTED: lambda: (
            f"Decision RECOVER_NOT_COUNTED: not counted as a failure, rule "
            f"{_cause_name(f.record.error)} ({_uncounted_budget(f)}); start again from "
            f"{latest}."),
        Decision.RECOVER: lambda: (
            f"Decision RECOVER: counted as {_budget(numbers.failure, policy)}; start again "
            f"from {latest}."),
        Decision.RESTART_FROM_SCRATCH: lambda: (
            f"Decision RESTART_FROM_SCRATCH: counted as {_budget(numbers.failure, policy)}; "
            "its checkpoints are discarded and training starts anew."),
        Decision.PREVIOUS_CHECKPOINT: lambda: (
            f"Decision PREVIOUS_CHECKPOINT: counted as {_budget(numbers.failure, policy)}; "
            f"fall back to {latest}."),
        Decision.GIVE_UP: lambda: (
            f"Decision GIVE_UP: {_give_up_why(f)}; the trial ends in ERROR."),
    }[f.record.decision or Decision.GIVE_UP]()
    if after.excluded_nodes and after.excluded_nodes != f.before.excluded_nodes:
        tail += f" The retry avoids {_node_ids(after.excluded_nodes)}."
    return tail


def _cause_name(error: TrialError | None) -> str:
    """The cause an actor failure died of, as the policy's rules name it."""
    return error.cause.value if isinstance(error, ActorError) else "unknown"


def _uncounted_budget(f: Folded) -> str:
    """``on_cause node_died=retry_not_counted, at most 3``."""
    cause = _cause_name(f.record.error)
    budget = f.after.policy.cause_budgets.get(cause)
    limit = f"at most {budget}" if budget is not None else "no limit"
    return f"on_cause {cause}=retry_not_counted, {limit}"


def _failed(f: Folded, event: TrialFailed) -> str:
    return f"{_failure_head(f, event)} {_failure_tail(f)}"


# ---------------------------------------------------------------- every other event


def _started(f: Folded, event: TrialStarted) -> str:
    if f.after.status is Status.RESTORING:
        return f"Started{_on(event.node)}, restoring from {_checkpoint(f.after.restoring_from)}."
    return f"Started{_on(event.node)} from scratch (no checkpoint)."


def _restored(f: Folded, event: RestoreSucceeded) -> str:
    held = _checkpoint(f.after.unconfirmed_restore)
    if f.user_load_fails:
        return (f"Ray's restore from {held} returned (it hands the checkpoint to the "
                "trainable); the trainable's own load of it is still part of the restore.")
    if f.before.user_restore_failed:
        return (f"Ray's restore from {held} returned; the trainable loads the checkpoint itself "
                "next (restore failures of this checkpoint so far: "
                f"{f.after.unconfirmed_restore_failures}).")
    if f.after.policy.restore_phase is RestorePhase.UNTIL_FIRST_REPORT:
        return ("Ray's restore returned; until the attempt's first result a failure is still "
                "one of this restore (restore_phase=until_first_report).")
    return "Restored from its checkpoint; the restore retry counter goes back to 0."


def _learned(f: Folded, event: DeathCauseLearned) -> str:
    source = f" ({event.source})" if event.source else ""
    return (f"Ray told later{source} why the actor of the failure at seq {event.failure_seq} "
            f"died: {event.death.describe()}. That failure stays decided as it was.")


def _advanced(f: Folded, event: ResumeAdvanced) -> str:
    saved = event.iterations_saved
    older = (f"Ray's saved state was {saved} iteration{'s' if saved != 1 else ''} older"
             if saved is not None else "Ray's saved state was older than the event log")
    if event.finished:
        return (f"{older} and had the trial unfinished; the log saw it end {event.finished}: "
                f"kept {event.finished} with {_checkpoint(event.to_checkpoint)}, not run "
                "again.")
    ray = (f"restored {_checkpoint(event.from_checkpoint)}" if event.from_checkpoint
           else "run it from scratch")
    return f"{older}; resumed from {_checkpoint(event.to_checkpoint)} (Ray would have {ray})."


def _not_advanced(f: Folded, event: ResumeNotAdvanced) -> str:
    # the user's Tuner.restore options (resume_unfinished=False, restart_errored=True)
    asked = event.reason.startswith("the user asked to ")
    how = "Run from scratch" if asked else "Resumed from Ray's saved state"
    return (f"{how} although the log recorded "
            f"{_checkpoint(event.checkpoint)}: {event.reason}; that work is redone.")


def _first_result(f: Folded, event: FirstResult) -> str:
    at = f" (iteration {event.iteration})" if event.iteration is not None else ""
    if f.before.unconfirmed_restore is not None:
        return (f"First result of this attempt{at}: the restore from "
                f"{_checkpoint(f.before.unconfirmed_restore)} worked.")
    return f"First result of this attempt{at}."


def _dropped(f: Folded, event: NodeAvoidanceDropped) -> str:
    why = _DROPPED.get(event.reason, event.reason or "dropped")
    waited = f" (waited {event.waited_ms / 1000:.1f} s)" if event.waited_ms is not None else ""
    return f"Node exclusion dropped{waited}: {why}."


def _discarded(f: Folded, event: CheckpointsDiscarded) -> str:
    deleted = ", folders deleted" if event.deleted else ""
    names = ", ".join(_checkpoint(c) for c in event.checkpoints) or "none"
    reason = f" ({event.reason})" if event.reason else ""
    return f"Checkpoints discarded{reason}: {names}{deleted}."


def _renamed(f: Folded, event: ExperimentRenamed) -> str:
    moved = (f" (its folder moved from {event.old_storage_path} to {event.new_storage_path})"
             if event.old_storage_path and event.old_storage_path != event.new_storage_path
             else "")
    return (f"The experiment continues under the name {event.new_name!r}, renamed from "
            f"{event.old_name!r}{moved}; history and counters kept.")


def _adopted(f: Folded, event: CountersAdopted) -> str:
    source = f" from {event.source}" if event.source else ""
    return (f"Failure counters adopted{source} (the log did not hold the trial's whole "
            f"history): failures {f.before.failures} -> {event.failures}, preemptions "
            f"{f.before.preemptions} -> {event.preemptions}.")


def _recreated(f: Folded, event: TrialRecreated) -> str:
    reason = f" ({event.reason})" if event.reason else ""
    return (f"A new trial took over this id after it ended {f.before.status.value}{reason}: "
            f"incarnation {f.after.incarnation}, its own counters from 0.")


def _reset(f: Folded, event: TrialReset) -> str:
    how = "from scratch" if event.from_scratch else "from its latest checkpoint"
    return f"Queued again after ending in {f.before.status.value}, {how}."


def _stopped(f: Folded, event: TrialStopped) -> str:
    return f"Stopped{f' ({event.reason})' if event.reason else ''}."


_WORDS: dict[type[Event], Callable[[Folded, Any], str]] = {
    TrialAdded: lambda f, e: "Added to the experiment.",
    PolicySet: lambda f, e: f"Policy in force from here: {describe_policy(e.policy)}.",
    TrialStarted: _started,
    NodesAvoided: lambda f, e: (f"The next attempt is placed away from {_node_ids(e.nodes)} "
                                "(the node(s) where this restore failed)."),
    NodeAvoidanceDropped: _dropped,
    RestoreSucceeded: _restored,
    FirstResult: _first_result,
    CheckpointSaved: lambda f, e: saved_words(f.before.checkpoints, e),
    TrialPaused: lambda f, e: "Paused by the scheduler.",
    TrialResumed: lambda f, e: f"Queued to run again (was {f.before.status.value}).",
    TrialCompleted: lambda f, e: "Completed training.",
    TrialStopped: _stopped,
    CheckpointsDiscarded: _discarded,
    TrialReset: _reset,
    ExperimentRenamed: _renamed,
    CountersAdopted: _adopted,
    TrialRecreated: _recreated,
    TrialFailed: _failed,
    DeathCauseLearned: _learned,
    ResumeAdvanced: _advanced,
    ResumeNotAdvanced: _not_advanced,
}


def word(f: Folded) -> str:
    """The words for one folded event."""
    words = _WORDS.get(type(f.event))
    return words(f, f.event) if words is not None else f"{f.event.type_name}."
