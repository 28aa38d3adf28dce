"""``RetryPolicy(avoid_failed_nodes=True)``: a restore retry runs away from the nodes it failed on.

The fold keeps the nodes a trial's restore episode failed on (``TrialState.excluded_nodes``);
this module makes Ray's placement follow it and owns the state of doing so: which trials wait
for a node outside their exclusion, and since when. A retry is placed by a label selector on
the node id (:mod:`statemachine.tune.ray_surface.placement`; Ray 2.49 or newer, checked once
by :func:`statemachine.tune.compat.selector_support`) and waits a bounded time
(``avoid_nodes_wait_s``): once it is over, or at once when no live node outside the exclusion
can host the trial, the exclusion is dropped and the trial may run anywhere
(``NodeAvoidanceDropped``). A restore that succeeds ends the exclusion; after
``Tuner.restore`` the exclusion in the log is put back into Ray.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from statemachine.domain.events import NodeAvoidanceDropped, NodesAvoided
from statemachine.domain.machine import TransitionRecord
from statemachine.domain.policy import RetryPolicy
from statemachine.domain.status import Status
from statemachine.tune.compat import selector_support
from statemachine.tune.ray_surface import placement as ray_placement
from statemachine.tune.ray_surface import trials as ray_trial
from statemachine.tune.reconcile import RAY_ERROR, RAY_PENDING, RAY_TERMINATED
from statemachine.tune.tracking import TrialTracker

if TYPE_CHECKING:
    from ray.tune.execution.placement_groups import PlacementGroupFactory

logger = logging.getLogger(__name__)

__all__ = ["NodeAvoidance"]

#: How often (seconds) waiting retries are checked against the bounded wait and the nodes.
CHECK_EVERY_S = 1.0
#: Each reason this Ray cannot place by node label, said once per process.
_said_unsupported: set[str] = set()


class NodeAvoidance:
    """The node exclusion of every trial of one driver session (the policy asks for it)."""

    def __init__(self, tracker: TrialTracker, policy: RetryPolicy) -> None:
        self._tracker = tracker
        self._policy = policy
        # trials whose retry waits for a node outside their exclusion: since (monotonic)
        self._waiting: dict[str, float] = {}
        self._checked = 0.0
        self._problem: str | None = None

    def prepare(self) -> None:
        """Check once that this Ray can place by node label; say so once if it cannot."""
        self._problem = selector_support()
        if self._problem is None:
            ray_placement.track_controller()
        elif self._problem not in _said_unsupported:
            _said_unsupported.add(self._problem)
            logger.warning(
                "statemachine: RetryPolicy(avoid_failed_nodes=True) cannot be applied: %s; "
                "restore retries run where Ray places them", self._problem)

    @staticmethod
    def _resources(trial: Any) -> PlacementGroupFactory:
        pgf = ray_placement.factory(trial)
        if pgf is None:
            raise ValueError(f"trial {ray_trial.trial_id(trial)} has no resources yet "
                             "(no placement group factory)")
        return pgf

    def _excluded(self, trial: Any) -> tuple[str, ...]:
        state = self._tracker.state(trial)
        return state.excluded_nodes if state is not None else ()

    def started(self, trial: Any) -> None:
        """The trial's actor was placed: its wait is over."""
        self._waiting.pop(ray_trial.trial_id(trial), None)

    def restored(self, trial: Any) -> None:
        """The restore succeeded: its episode, and any exclusion of failed nodes, is over."""
        self._unexclude(trial)

    def _unexclude(self, trial: Any) -> None:
        """The trial's own resources again (no node excluded)."""
        if self._problem is None:
            ray_placement.set_factory(
                trial, ray_placement.without_exclusion(self._resources(trial)))

    def place_retry(self, trial: Any, record: TransitionRecord) -> None:
        """After a failure: place the trial's retry away from the nodes where its restore
        episode failed (or on any node, when the episode is over)."""
        trial_id = ray_trial.trial_id(trial)
        nodes = self._excluded(trial)
        if record.status_after is not Status.PENDING or not nodes:
            self._waiting.pop(trial_id, None)
            self._unexclude(trial)
            return
        if self._problem is not None:
            self._tracker.record(trial, NodeAvoidanceDropped(nodes=nodes, reason="unsupported"))
            return
        if not ray_placement.can_host_elsewhere(trial, nodes):
            self._drop(trial, "no_other_node", 0.0)
            return
        excluded = ray_placement.with_exclusion(self._resources(trial), nodes)
        if excluded is None:
            logger.warning("statemachine: trial %s selects its nodes by %s itself; its retry is "
                           "placed by that selector", trial_id, ray_placement.NODE_ID_LABEL)
            self._tracker.record(trial, NodeAvoidanceDropped(nodes=nodes, reason="unsupported"))
            return
        if ray_placement.set_factory(trial, excluded):
            self._waiting[trial_id] = time.monotonic()
            self._tracker.record(trial, NodesAvoided(nodes=nodes))
            logger.warning("statemachine: trial %s retries its restore away from node(s) %s",
                           trial_id, ", ".join(n[:12] for n in nodes))

    def _drop(self, trial: Any, reason: str, waited_s: float) -> bool:
        """Let the trial run on any node again; record why. False if Tune would not let go."""
        nodes = self._excluded(trial)
        if not ray_placement.set_factory(
                trial, ray_placement.without_exclusion(self._resources(trial))):
            return False
        trial_id = ray_trial.trial_id(trial)
        self._waiting.pop(trial_id, None)
        self._tracker.record(trial, NodeAvoidanceDropped(nodes=nodes, reason=reason,
                                                         waited_ms=int(waited_s * 1000)))
        logger.warning("statemachine: trial %s: %s; its retry may run on any node", trial_id,
                       "no other node can host it" if reason == "no_other_node"
                       else f"no other node took it within {waited_s:.0f} s")
        return True

    def check(self, trials: list[Any]) -> None:
        """Bounded wait: a retry still waiting for another node runs anywhere once the wait is
        over, or at once when no live node outside its exclusion can host it."""
        now = time.monotonic()
        if not self._waiting or now - self._checked < CHECK_EVERY_S:
            return
        self._checked = now
        limit = self._policy.avoid_nodes_wait_s
        for trial in trials:
            trial_id = ray_trial.trial_id(trial)
            since = self._waiting.get(trial_id)
            if since is None:
                continue
            ray_status = ray_trial.status(trial)
            if ray_status != RAY_PENDING:
                if ray_status in (RAY_TERMINATED, RAY_ERROR):
                    self._waiting.pop(trial_id, None)
                continue
            nodes = self._excluded(trial)
            if not nodes:
                self._waiting.pop(trial_id, None)
                continue
            waited = now - since
            if not ray_placement.can_host_elsewhere(trial, nodes):
                self._drop(trial, "no_other_node", waited)
            elif waited >= limit:
                self._drop(trial, "timeout", waited)

    def restore_placement(self, trial: Any) -> None:
        """After ``Tuner.restore``: the exclusion in the log is the one in force in Ray."""
        if self._problem is not None:
            return
        current = ray_placement.factory(trial)
        if current is None:
            return
        wanted = self._excluded(trial)
        if wanted and ray_trial.status(trial) == RAY_PENDING:
            excluded = ray_placement.with_exclusion(current, wanted)
            if excluded is not None and ray_placement.set_factory(trial, excluded):
                self._waiting[ray_trial.trial_id(trial)] = time.monotonic()
                logger.warning("statemachine: trial %s: its restore retry still avoids "
                               "node(s) %s (from the event log)", ray_trial.trial_id(trial),
                               ", ".join(n[:12] for n in wanted))
        elif ray_placement.excluded_by(current):
            ray_placement.set_factory(trial, ray_placement.without_exclusion(current))
