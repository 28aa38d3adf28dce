"""Ray follows the decision the fold made about a failure.

After a failure is recorded, the fold's counters go into Ray's trial (``num_failures`` and the
restore-failure counter, which Ray's ``should_recover`` and restore retry read), and
``should_recover`` is answered with the fold's decision (through the error seam). The
decisions Ray does not have are carried out here: ``RESTART_FROM_SCRATCH`` forgets every
checkpoint (and deletes their folders when the policy says so), ``PREVIOUS_CHECKPOINT`` points
Ray at the newest checkpoint older than the one that failed to restore.
"""

from __future__ import annotations

import logging
from typing import Any

from statemachine.domain.events import CheckpointsDiscarded
from statemachine.domain.machine import TransitionRecord
from statemachine.domain.policy import RetryPolicy
from statemachine.domain.status import Decision, Status
from statemachine.tune import checkpoints
from statemachine.tune.ray_surface import checkpoint_manager as ray_checkpoints
from statemachine.tune.ray_surface import trials as ray_trial
from statemachine.tune.tracking import TrialTracker

logger = logging.getLogger(__name__)

__all__ = ["Steering"]


class Steering:
    """Puts each failure's decision into Ray's trial, and holds ``should_recover``'s answer."""

    def __init__(self, tracker: TrialTracker) -> None:
        self._tracker = tracker
        # trial id -> should_recover's answer to the failure just recorded
        self._recover: dict[str, bool] = {}

    def follow(self, trial: Any, record: TransitionRecord, known_checkpoints: tuple[str, ...],
               policy: RetryPolicy) -> None:
        """Put the fold's counters and decision into Ray's trial; ``known_checkpoints``: the
        trial's checkpoints in the log before the failure."""
        counters = record.counters
        ray_trial.set_num_failures(trial, counters.failures)
        ray_trial.set_restore_failures(trial, counters.restore_failures)
        self._recover[ray_trial.trial_id(trial)] = record.status_after is Status.PENDING
        if record.decision is Decision.RESTART_FROM_SCRATCH:
            self._restart_from_scratch(trial, known_checkpoints, policy)
        elif record.decision is Decision.PREVIOUS_CHECKPOINT:
            after = self._tracker.state(trial)
            target = after.latest_checkpoint if after else None
            kept = set(after.checkpoints) if after else set()
            dropped = [c for c in (*known_checkpoints, ray_trial.current_checkpoint(trial))
                       if c and c not in kept]
            ray_checkpoints.restore_from(trial, target, dropped)
            logger.warning("statemachine: trial %s falls back to checkpoint %s",
                           ray_trial.trial_id(trial), target or "none (from scratch)")

    def _restart_from_scratch(self, trial: Any, known_checkpoints: tuple[str, ...],
                              policy: RetryPolicy) -> None:
        forgotten = ray_checkpoints.forget_checkpoints(trial)
        paths = list(dict.fromkeys([*known_checkpoints, *forgotten]))
        deleted = False
        if policy.delete_discarded_checkpoints and paths:
            report = checkpoints.delete_checkpoint_dirs(trial, paths)
            deleted = report.all_gone
        logger.warning(
            "statemachine: trial %s restarts from scratch (restore retries spent); "
            "%d checkpoint(s) discarded%s", ray_trial.trial_id(trial), len(paths),
            ", folders deleted" if deleted else "",
        )
        self._tracker.record(trial, CheckpointsDiscarded(
            checkpoints=tuple(paths), deleted=deleted,
            reason="restore retries spent: restart_from_scratch",
        ))

    def recover_decision(self, trial: Any) -> bool | None:
        """Our answer to ``should_recover`` after the failure just recorded (once)."""
        return self._recover.pop(ray_trial.trial_id(trial), None)

    def forget_answers(self) -> None:
        """The step ended: answers Ray did not ask for are dropped."""
        self._recover.clear()
