"""Ray's status changes that no Tune hook reports: pauses, resumes, resets, stops, the end.

The error seam reports every ``Trial.set_status``. A pause, a resume and a reset
(``resume_errored``) are recorded as they happen. Ray pauses a trial by stopping it
(TERMINATED) and then setting PAUSED, so a live trial set TERMINATED is only recorded as
stopped if it is still TERMINATED at the step's end (:meth:`StatusChanges.settle`). However
the experiment ends (``fail_fast``, a stopper, a time budget, SIGINT), the log then ends with
Ray's status for every trial Ray leaves behind (:func:`statemachine.tune.reconcile.end_event`).
"""

from __future__ import annotations

from typing import Any

from statemachine.domain.events import TrialPaused, TrialReset, TrialResumed, TrialStopped
from statemachine.domain.status import Status
from statemachine.tune.ray_surface import trials as ray_trial
from statemachine.tune.reconcile import (
    RAY_PAUSED,
    RAY_PENDING,
    RAY_TERMINATED,
    STOPPED_BY_TUNE,
    end_event,
)
from statemachine.tune.tracking import TrialTracker

__all__ = ["StatusChanges"]


class StatusChanges:
    """Records the status changes of one driver session's trials."""

    def __init__(self, tracker: TrialTracker) -> None:
        self._tracker = tracker
        # trials Ray set TERMINATED in this step: stopped, unless Ray goes on to pause them
        self._maybe_stopped: dict[str, Any] = {}

    def changed(self, trial: Any, new: str) -> None:
        """Ray set the trial's status to ``new``."""
        state = self._tracker.state(trial)
        if state is None:
            return
        trial_id = ray_trial.trial_id(trial)
        if new == RAY_TERMINATED and state.status.is_live:
            self._maybe_stopped[trial_id] = trial  # decided at the step's end
            return
        self._maybe_stopped.pop(trial_id, None)
        if new == RAY_PAUSED and state.status is Status.RUNNING:
            self._tracker.record(trial, TrialPaused())
        elif new == RAY_PENDING and state.status is Status.PAUSED:
            self._tracker.record(trial, TrialResumed())
        elif new == RAY_PENDING and state.status.is_terminal:
            self._tracker.record(trial, TrialReset(from_scratch=False))

    def started(self, trial: Any) -> None:
        """An actor started for the trial: it was not stopped."""
        self._maybe_stopped.pop(ray_trial.trial_id(trial), None)

    def settle(self) -> None:
        """The step ended: a live trial Ray left TERMINATED was stopped."""
        for trial_id, trial in list(self._maybe_stopped.items()):
            self._maybe_stopped.pop(trial_id, None)
            state = self._tracker.state(trial)
            if (ray_trial.status(trial) == RAY_TERMINATED and state is not None
                    and state.status.is_live):
                self._tracker.record(trial, TrialStopped(reason=STOPPED_BY_TUNE))

    def align_end(self, trials: list[Any]) -> None:
        """The experiment ended: bring every trial of the log to Ray's final status."""
        for trial in trials:
            state = self._tracker.state(trial)
            if state is None:
                continue
            event = end_event(state.status, ray_trial.status(trial))
            if event is not None:
                self._tracker.record(trial, event)
