"""Why a trial is where it is, in plain words, from its events and the policy in force.

The events are folded through the domain state machine (the same code as live operation);
each step's wording is built from the transition it made and the policy that applied at that
moment, e.g. ``Restore failure # 2 (retry 2 of 3)``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from statemachine.domain.events import (
    CheckpointSaved,
    CheckpointsDiscarded,
    CountersAdopted,
    Event,
    ExperimentRenamed,
    FirstResult,
    NodeAvoidanceDropped,
    NodesAvoided,
    PolicySet,
    RestoreSucceeded,
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
from statemachine.domain.failures import AbortError, ActorError, RestoreError
from statemachine.domain.machine import TransitionRecord, apply
from statemachine.domain.nodes import NodeRef, short_node_id
from statemachine.domain.policy import RestorePhase, RetryPolicy
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
class Step:
    """One line of an explanation."""

    seq: int | None
    position: int | None
    epoch: int | None
    event: str
    decision: str | None
    text: str

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of this step."""
        return {
            "seq": self.seq,
            "position": self.position,
            "epoch": self.epoch,
            "event": self.event,
            "decision": self.decision,
            "text": self.text,
        }


def describe_policy(policy: RetryPolicy) -> str:
    """The policy as one line of plain words."""
    limit = "unlimited" if policy.max_failures < 0 else str(policy.max_failures)
    parts = [
        f"max_failures={limit}",
        f"restore_retry_num={policy.restore_retry_num}",
        f"on_restore_exhausted={policy.on_restore_exhausted.value}",
        "preemptions count as failures" if policy.count_preemption_as_failure
        else "preemptions do not count as failures",
    ]
    if policy.max_preemptions is not None:
        parts.append(f"max_preemptions={policy.max_preemptions}")
    if policy.fatal_exception_types:
        parts.append(f"fatal types: {', '.join(policy.fatal_exception_types)}")
    if policy.delete_discarded_checkpoints:
        parts.append("discarded checkpoints are deleted")
    if policy.avoid_failed_nodes:
        parts.append(f"restore retries avoid the nodes that failed (waiting up to "
                     f"{policy.avoid_nodes_wait_s} s for another node)")
    if policy.restore_phase is RestorePhase.UNTIL_FIRST_REPORT:
        parts.append("a failure after a restore and before the attempt's first result is a "
                     "restore failure (restore_phase=until_first_report)")
    return ", ".join(parts)


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


def _budget(failures: int, policy: RetryPolicy) -> str:
    if policy.max_failures < 0:
        return f"failure {failures} (max_failures unlimited)"
    return f"failure {failures} of max_failures {policy.max_failures}"


def _checkpoint(name: str | None) -> str:
    """A checkpoint as people read it: its last path component (``show`` has the full path)."""
    if not name:
        return "scratch"
    return name.rstrip("/").rsplit("/", 1)[-1]


def _cause(event: TrialFailed) -> str:
    error = event.error
    message = f": {error.message}" if error.message else ""
    return f"{error.kind} ({error.cause_type}{message})"


class _Narrator:
    """Folds one trial's events and words each transition."""

    def __init__(
        self, trial_id: str, sessions: Mapping[int, str], kinds: Mapping[int, str | None]
    ) -> None:
        self.state = TrialState(trial_id)
        self.sessions = sessions
        self.kinds = kinds
        self.restore_ordinal = 0
        self.preemption_ordinal = 0
        # the restore Ray called succeeded while no result came yet: its step and ordinal
        self.held_restore: tuple[int, int] | None = None
        self._restored_ordinal = 0
        self.last_epoch: int | None = None
        self.steps: list[Step] = []
        self.last_failure: Step | None = None

    def feed(self, where: Located | None, event: Event) -> TransitionRecord:
        epoch = where.epoch if where is not None else None
        if epoch is not None and self.last_epoch is not None and epoch != self.last_epoch:
            self._epoch_change(self.last_epoch, epoch)
        elif epoch is not None and self.last_epoch is None and epoch > 1:
            self._first_epoch(epoch)
        if epoch is not None:
            self.last_epoch = epoch
        before = self.state.copy()
        record = apply(self.state, event)
        text = self._word(before, event, record)
        step = Step(
            where.seq if where is not None else self.state.seq,
            where.position if where is not None else None,
            epoch,
            event.type_name,
            record.decision.value if record.decision else None,
            text,
        )
        self.steps.append(step)
        if isinstance(event, TrialFailed):
            self.last_failure = step
        if isinstance(event, RestoreSucceeded):
            self.held_restore = (len(self.steps) - 1, self._restored_ordinal)
        elif not isinstance(event, (PolicySet, CheckpointSaved, NodesAvoided,
                                    NodeAvoidanceDropped, CheckpointsDiscarded)):
            self.held_restore = None
        return record

    def _epoch_change(self, old: int, new: int) -> None:
        end = self.sessions.get(old, "unknown")
        how = {
            "clean": "ended cleanly",
            "crashed": "crashed (its session never ended)",
        }.get(end, "ended")
        s = self.state
        kind = self.kinds.get(new)
        if kind == "ingest":
            self.steps.append(Step(
                None, None, new, "Ingested", None,
                f"Epoch {new} is a later trial-replay ingest of Ray's files: what the "
                f"experiment did after epoch {old}, reconstructed.",
            ))
            return
        if kind == "fresh":
            self.steps.append(Step(
                None, None, new, "DriverStarted", None,
                f"The driver of epoch {old} {how}; epoch {new} is a fresh Tuner.fit() that "
                "reuses the experiment's name, not a restore: it kept the counters the log "
                f"holds (failures {s.failures}, restore failures this episode "
                f"{s.restore_failures}, preemptions {s.preemptions}).",
            ))
            return
        by = ", a Tuner.restore," if kind == "restore" else ""
        self.steps.append(Step(
            None, None, new, "DriverResumed", None,
            f"The driver of epoch {old} {how}; epoch {new}{by} took over with the counters "
            f"the log kept: failures {s.failures}, restore failures this episode "
            f"{s.restore_failures or s.unconfirmed_restore_failures}, preemptions "
            f"{s.preemptions} (Ray itself would have lost the restore counter).",
        ))

    def _first_epoch(self, epoch: int) -> None:
        """A trial first seen after epoch 1: say whether its driver was a fresh run."""
        kind = self.kinds.get(epoch)
        if kind == "fresh":
            self.steps.append(Step(
                None, None, epoch, "DriverStarted", None,
                f"Epoch {epoch} is a fresh Tuner.fit() that reuses the experiment's name "
                f"(a new run, not a restore of epoch {epoch - 1}).",
            ))
        elif kind == "restore":
            self.steps.append(Step(
                None, None, epoch, "DriverResumed", None,
                f"Epoch {epoch} is a Tuner.restore of the experiment.",
            ))

    def _word(self, before: TrialState, event: Event, record: TransitionRecord) -> str:
        state = self.state
        policy = state.policy
        if isinstance(event, TrialAdded):
            return "Added to the experiment."
        if isinstance(event, PolicySet):
            return f"Policy in force from here: {describe_policy(event.policy)}."
        if isinstance(event, TrialStarted):
            if state.status is Status.RESTORING:
                return (f"Started{_on(event.node)}, restoring from "
                        f"{_checkpoint(state.restoring_from)}.")
            return f"Started{_on(event.node)} from scratch (no checkpoint)."
        if isinstance(event, NodesAvoided):
            return (f"The next attempt is placed away from {_node_ids(event.nodes)} (the "
                    "node(s) where this restore failed).")
        if isinstance(event, NodeAvoidanceDropped):
            why = _DROPPED.get(event.reason, event.reason or "dropped")
            waited = (f" (waited {event.waited_ms / 1000:.1f} s)"
                      if event.waited_ms is not None else "")
            return f"Node exclusion dropped{waited}: {why}."
        if isinstance(event, RestoreSucceeded):
            self._restored_ordinal, self.restore_ordinal = self.restore_ordinal, 0
            if before.user_restore_failed:
                return (f"Ray's restore from {_checkpoint(state.unconfirmed_restore)} returned; "
                        "the trainable loads the checkpoint itself next (restore failures of "
                        f"this checkpoint so far: {state.unconfirmed_restore_failures}).")
            if policy.restore_phase is RestorePhase.UNTIL_FIRST_REPORT:
                return ("Ray's restore returned; until the attempt's first result a failure "
                        "is still one of this restore (restore_phase=until_first_report).")
            return "Restored from its checkpoint; the restore retry counter goes back to 0."
        if isinstance(event, FirstResult):
            at = f" (iteration {event.iteration})" if event.iteration is not None else ""
            if before.unconfirmed_restore is not None:
                return (f"First result of this attempt{at}: the restore from "
                        f"{_checkpoint(before.unconfirmed_restore)} worked.")
            return f"First result of this attempt{at}."
        if isinstance(event, CheckpointSaved):
            return f"Saved {_checkpoint(event.checkpoint)}."
        if isinstance(event, TrialPaused):
            return "Paused by the scheduler."
        if isinstance(event, TrialResumed):
            return f"Queued to run again (was {before.status.value})."
        if isinstance(event, TrialCompleted):
            return "Completed training."
        if isinstance(event, TrialStopped):
            reason = f" ({event.reason})" if event.reason else ""
            return f"Stopped{reason}."
        if isinstance(event, CheckpointsDiscarded):
            deleted = ", folders deleted" if event.deleted else ""
            names = ", ".join(_checkpoint(c) for c in event.checkpoints) or "none"
            reason = f" ({event.reason})" if event.reason else ""
            return f"Checkpoints discarded{reason}: {names}{deleted}."
        if isinstance(event, TrialReset):
            self.restore_ordinal = 0
            how = "from scratch" if event.from_scratch else "from its latest checkpoint"
            return f"Queued again after ending in {before.status.value}, {how}."
        if isinstance(event, ExperimentRenamed):
            moved = (f" (its folder moved from {event.old_storage_path} to "
                     f"{event.new_storage_path})"
                     if event.old_storage_path and event.old_storage_path != event.new_storage_path
                     else "")
            return (f"The experiment continues under the name {event.new_name!r}, renamed from "
                    f"{event.old_name!r}{moved}; history and counters kept.")
        if isinstance(event, CountersAdopted):
            source = f" from {event.source}" if event.source else ""
            return (f"Failure counters adopted{source} (the log did not hold the trial's whole "
                    f"history): failures {before.failures} -> {event.failures}, preemptions "
                    f"{before.preemptions} -> {event.preemptions}.")
        if isinstance(event, TrialRecreated):
            self.restore_ordinal = 0
            reason = f" ({event.reason})" if event.reason else ""
            return (f"A new trial took over this id after it ended {before.status.value}"
                    f"{reason}: incarnation {state.incarnation}, its own counters from 0.")
        if isinstance(event, TrialFailed):
            return self._word_failure(before, event, record, policy)
        return f"{event.type_name}."

    def _word_failure(
        self, before: TrialState, event: TrialFailed, record: TransitionRecord,
        policy: RetryPolicy,
    ) -> str:
        state = self.state
        decision = record.decision
        error = event.error
        checkpoint = before.restoring_from or before.latest_checkpoint
        fatal = not error.retryable or policy.is_fatal(error.cause_type)
        # A restore retry was left in the episode, yet it gave up: the trial was already past
        # max_failures (resumed by Tuner.restore(resume_errored=True)), and Ray grants a
        # restore retry only within max_failures.
        refused = (
            decision is Decision.GIVE_UP and not fatal and before.status is Status.RESTORING
            and before.restore_failures < policy.restore_retry_num
            and 0 <= policy.max_failures < before.failures
        )
        # A failure of the user's own restore, after Ray's restore returned (restoring(), or
        # restore_phase=until_first_report): the restore rules, as the fold applied them.
        users = before.status is Status.RUNNING and before.unconfirmed_restore is not None and (
            isinstance(error, RestoreError)
            or policy.restore_phase is RestorePhase.UNTIL_FIRST_REPORT)
        if users:
            checkpoint = before.unconfirmed_restore
            self.restore_ordinal = before.unconfirmed_restore_failures
            if self.held_restore is not None:
                index, ordinal = self.held_restore
                self.restore_ordinal = max(ordinal, self.restore_ordinal)
                self.steps[index] = dataclasses.replace(self.steps[index], text=(
                    f"Ray's restore from {_checkpoint(checkpoint)} returned (it hands the "
                    "checkpoint to the trainable); the trainable's own load of it is still "
                    "part of the restore."))
        if isinstance(error, RestoreError) and before.status is Status.RUNNING and not users:
            head = (f"Failure inside restoring(){_on(event.node)} with no restore to retry "
                    f"(no checkpoint restored, or after the attempt's first result): "
                    f"{_cause(event)}; counted as a training failure.")
        elif isinstance(error, RestoreError) or before.status is Status.RESTORING or users:
            self.restore_ordinal += 1
            k, r = self.restore_ordinal, policy.restore_retry_num
            where = _on(event.node)
            if decision is Decision.RETRY_RESTORE:
                head = f"Restore failure # {k}{where} (retry {k} of {r})"
            elif refused:
                head = (f"Restore failure # {k}{where} (retry refused: failures already "
                        "exceed max_failures)")
            else:
                head = f"Restore failure # {k}{where} (restore retries spent: {r} of {r})"
            head += f": {_cause(event)}."
        elif isinstance(error, ActorError) and error.preempted:
            self.preemption_ordinal += 1
            head = f"Preemption # {self.preemption_ordinal}{_on(event.node)}: {_cause(event)}."
        elif isinstance(error, AbortError):
            head = f"Not retryable{_on(event.node)}: {_cause(event)}."
        else:
            head = f"Training failure{_on(event.node)}: {_cause(event)}."
            if before.status is Status.RUNNING and before.unconfirmed_restore is not None:
                head += (" It came after Ray's restore and before the attempt's first result: "
                         "if it is the trainable's own load of its checkpoint, restoring() or "
                         "restore_phase=until_first_report makes it a restore failure.")
        if decision is Decision.RETRY_RESTORE:
            tail = (f"Decision RETRY_RESTORE: restore again from {_checkpoint(checkpoint)}; "
                    f"not counted as a failure (failures stay at {state.failures}).")
        elif decision is Decision.RECOVER_PREEMPTED:
            tail = ("Decision RECOVER_PREEMPTED: not counted as a failure (preemptions "
                    f"{state.preemptions}); start again from "
                    f"{_checkpoint(state.latest_checkpoint)}.")
        elif decision is Decision.RECOVER:
            tail = (f"Decision RECOVER: counted as {_budget(state.failures, policy)}; start "
                    f"again from {_checkpoint(state.latest_checkpoint)}.")
        elif decision is Decision.RESTART_FROM_SCRATCH:
            self.restore_ordinal = 0
            tail = (f"Decision RESTART_FROM_SCRATCH: counted as "
                    f"{_budget(state.failures, policy)}; its checkpoints are discarded and "
                    "training starts anew.")
        elif decision is Decision.PREVIOUS_CHECKPOINT:
            self.restore_ordinal = 0
            tail = (f"Decision PREVIOUS_CHECKPOINT: counted as "
                    f"{_budget(state.failures, policy)}; fall back to "
                    f"{_checkpoint(state.latest_checkpoint)}.")
        elif decision is Decision.GIVE_UP:
            if refused:
                why = (f"the restore retry was refused because failures ({before.failures}) "
                       f"already exceed max_failures {policy.max_failures} (a restore retry "
                       "is granted only within max_failures, as Ray does)")
            elif fatal:
                why = "the failure is not retryable"
            elif isinstance(error, ActorError) and error.preempted and not (
                policy.count_preemption_as_failure
            ):
                why = f"the preemption budget or failure budget is spent ({state.preemptions} " \
                      "preemptions)"
            else:
                why = f"failure {state.failures} exceeds max_failures {policy.max_failures}"
                if before.status is Status.RESTORING or users:
                    why = f"the restore retries are spent and {why}"
            tail = f"Decision GIVE_UP: {why}; the trial ends in ERROR."
        else:
            tail = f"Status {record.status_before.value} -> {record.status_after.value}."
        if state.excluded_nodes and state.excluded_nodes != before.excluded_nodes:
            tail += f" The retry avoids {_node_ids(state.excluded_nodes)}."
        return f"{head} {tail}"


@dataclass
class Explanation:
    """Why a trial is where it is."""

    trial_id: str
    state: TrialState
    summary: str
    steps: list[Step]

    def to_dict(self, experiment: str) -> dict[str, Any]:
        """The JSON form (schema ``explain`` in docs/cli.md)."""
        return {
            "experiment": experiment,
            "trial_id": self.trial_id,
            "status": self.state.status.value,
            "summary": self.summary,
            "policy": self.state.policy.to_dict(),
            "policy_text": describe_policy(self.state.policy),
            "steps": [s.to_dict() for s in self.steps],
        }


def explain_trial(
    trial_id: str,
    events: Sequence[tuple[Located | None, Event]],
    sessions: Mapping[int, str] | None = None,
    kinds: Mapping[int, str | None] | None = None,
) -> Explanation:
    """Explain ``events`` (in order, each with where it sits in the log).

    ``sessions`` maps a driver epoch to how its session ended (``clean``, ``crashed`` or
    ``open``), to word the driver restarts the trial lived through; ``kinds`` maps an epoch
    to how its driver began (``fresh``: ``Tuner.fit()``, ``restore``: ``Tuner.restore``).
    """
    narrator = _Narrator(trial_id, sessions or {}, kinds or {})
    for where, event in events:
        narrator.feed(where, event)
    state = narrator.state
    return Explanation(trial_id, state, _summary(state, narrator.last_failure), narrator.steps)


def _summary(state: TrialState, last_failure: Step | None) -> str:
    counts = (f"{state.failures} failure(s), {state.total_restore_failures} restore "
              f"failure(s), {state.preemptions} preemption(s)")
    where = ""
    if last_failure is not None and last_failure.seq is not None:
        where = f" at seq {last_failure.seq}"
        if last_failure.position is not None:
            where += f" (position {last_failure.position})"
    status = state.status
    if status is Status.ERROR and last_failure is not None:
        return (f"Trial {state.trial_id} is ERROR: it gave up{where}. "
                f"{last_failure.text} In all: {counts}.")
    if status is Status.TERMINATED:
        return f"Trial {state.trial_id} is TERMINATED: it finished after {counts}."
    if last_failure is not None and last_failure.decision != Decision.GIVE_UP.value:
        return (f"Trial {state.trial_id} is {status.value}: its last failure{where} was "
                f"recovered from ({last_failure.decision}); {counts}.")
    return f"Trial {state.trial_id} is {status.value}; {counts}."
