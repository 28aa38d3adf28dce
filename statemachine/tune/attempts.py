"""Each trial's current attempt: where its actor runs, its first result, its failure.

An attempt starts when Tune starts an actor for the trial (``on_trial_start``: the actor and
the node it was placed on are read at once, while Ray still knows them). Its first result is
recorded (``FirstResult``): it ends the stretch in which a failure can still be one of the
user's restore. Its failure, reported by the error seam, is typed by the classification rules
in the phase it failed in (:mod:`statemachine.tune.ray_errors`) and located on the node of
the actor it names, with the trial's training iteration. Why that actor died is read from the
exception (:func:`~statemachine.tune.ray_errors.exception_death`); an actor death the exception
says nothing about is asked of Ray in the background once recorded
(:mod:`statemachine.tune.late_causes`), and what Ray answers is recorded at a later step
(``DeathCauseLearned``). A failure that reaches Tune's hooks but not the seam (the callback
joined a controller late) is said once per process, since it is not in the log.
"""

from __future__ import annotations

import logging
from typing import Any

from statemachine.domain.death import DeathCause
from statemachine.domain.events import FirstResult, TrialFailed
from statemachine.domain.failures import ActorError
from statemachine.domain.nodes import NodeRef
from statemachine.domain.policy import RetryPolicy
from statemachine.domain.rules import failure_in_restore
from statemachine.domain.state import TrialState
from statemachine.domain.status import Status
from statemachine.tune.late_causes import LateCauses
from statemachine.tune.ray_errors import classify_ray
from statemachine.tune.ray_surface import nodes as ray_nodes
from statemachine.tune.ray_surface import trials as ray_trial
from statemachine.tune.recorder import Recorder

logger = logging.getLogger(__name__)

__all__ = ["Attempts"]

_said_no_seam = False


class Attempts:
    """The current attempt of every trial of one driver session."""

    def __init__(self) -> None:
        # where each trial's current actor was placed: (actor id, node)
        self._actors: dict[str, tuple[str | None, NodeRef | None]] = {}
        # trials started whose first result of that attempt has not come yet
        self._awaiting_result: set[str] = set()
        # trials whose failure the seam recorded in this step
        self._failures_recorded: set[str] = set()
        # the actor and node of a failure of unknown cause, until it is recorded
        self._unknown: dict[str, tuple[str | None, str | None]] = {}
        self.late = LateCauses()
        """Ray asked why actors died, in the background."""

    def started(self, trial: Any) -> NodeRef | None:
        """An actor started for the trial: returns the node it was placed on."""
        trial_id = ray_trial.trial_id(trial)
        actor = self._actors[trial_id] = ray_nodes.started_actor(trial)
        self._awaiting_result.add(trial_id)
        return actor[1]

    def first_result(self, trial: Any, result: Any) -> FirstResult | None:
        """The event of the attempt's first result; ``None`` for every later one."""
        trial_id = ray_trial.trial_id(trial)
        if trial_id not in self._awaiting_result:
            return None
        self._awaiting_result.discard(trial_id)
        iteration_done = result.get("training_iteration") if isinstance(result, dict) else None
        return FirstResult(iteration=iteration_done if type(iteration_done) is int else None)

    def failure(self, trial: Any, exc: BaseException | None, restoring: bool,
                before: TrialState | None, policy: RetryPolicy) -> TrialFailed:
        """The attempt failed: the event that records it, typed and located.

        ``restoring``: Ray was restoring the trial; ``before``: the trial's state before the
        failure (a failure before the attempt's first result may be its restore's).
        """
        trial_id = ray_trial.trial_id(trial)
        self._awaiting_result.discard(trial_id)  # this attempt is over
        if exc is None:
            exc = RuntimeError("Ray reported a failure without an exception")
        phase = Status.RESTORING if restoring else Status.RUNNING
        if before is not None and failure_in_restore(before, policy):
            phase = Status.RESTORING  # before the attempt's first result: still its restore
        error = classify_ray(exc, phase, policy.fatal_exception_types)
        started = self._actors.pop(trial_id, None)
        node = ray_nodes.failure_node(trial, exc, started)
        if isinstance(error, ActorError) and error.cause is DeathCause.UNKNOWN:
            actor_id = ray_nodes.failure_actor_id(exc) or (started[0] if started else None)
            self._unknown[trial_id] = (actor_id, node.node_id if node else None)
        return TrialFailed(error=error, node=node, iteration=ray_trial.last_iteration(trial))

    def failure_recorded(self, trial: Any, state: TrialState | None = None) -> None:
        """The seam recorded the trial's failure in this step (``state``: the trial's state
        after it; a failure of unknown cause is then asked of Ray in the background)."""
        trial_id = ray_trial.trial_id(trial)
        self._failures_recorded.add(trial_id)
        unknown = self._unknown.pop(trial_id, None)
        if unknown is not None and state is not None:
            self.late.ask(trial_id, state.seq, *unknown)

    def failure_reported(self, trial: Any) -> None:
        """Tune reported a failure of the trial: say so once if the seam did not."""
        if ray_trial.trial_id(trial) in self._failures_recorded:
            return
        global _said_no_seam
        if not _said_no_seam:
            _said_no_seam = True
            logger.warning(
                "statemachine: a failure of trial %s reached Tune's callbacks but not the "
                "error seam (Trial methods not wrapped: was the callback given to this "
                "TuneController after it started?); such failures are not in the event log",
                ray_trial.trial_id(trial))

    def step_ended(self, recorder: Recorder | None = None, end: bool = False) -> None:
        """Failures recorded in the step are no longer awaited from Tune's hooks; the causes
        Ray told since the last step are recorded (``end``: the experiment ends, the lookups
        still running are waited for, a bounded time)."""
        self._failures_recorded.clear()
        if end and self.late.pending:
            self.late.wait()
        for trial_id, event in self.late.learned():
            if recorder is not None:
                recorder.record(trial_id, event)
