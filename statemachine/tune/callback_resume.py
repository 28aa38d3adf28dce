"""The callback's two hooks into Ray's restore (issue 27): the trials ``Tuner.restore`` brought
back, before Ray requeues them, and each trial Ray queues, before it tracks its status.

Both are wrappers of Ray's ``TuneController`` (:mod:`.ray_surface.requeue`, installed once per
process by :func:`install_hooks`); each calls every event log callback of the controller, which
writes what the log knows into the trials (:mod:`statemachine.tune.resume_from_log`).
"""

from __future__ import annotations

from typing import Any

from statemachine.tune.hook_guard import never_raises as _never_raises
from statemachine.tune.log_session import LogSession
from statemachine.tune.ray_surface import requeue
from statemachine.tune.ray_surface import trials as ray_trial
from statemachine.tune.recorder import Recorder
from statemachine.tune.resume_from_log import advance
from statemachine.tune.resume_regenerated import advance_regenerated
from statemachine.tune.tracking import TrialTracker

__all__ = ["ResumeHooks", "install_hooks"]


def install_hooks() -> None:
    """Wrap Ray's requeue of restored trials and its ``add_trial`` (idempotent)."""
    requeue.install(_before_requeue)  # before Tuner.restore's controller resumes
    requeue.install_add(_before_add)


def _before_requeue(callbacks: list[Any], trials: list[Any], resume: dict[str, str]) -> None:
    """Every event log callback of the controller sees the restored trials first, and the
    user's resume options (:func:`.requeue.resume_types`)."""
    for callback in callbacks:
        if isinstance(callback, ResumeHooks):
            callback.restored(trials, resume)


def _before_add(callbacks: list[Any], trial: Any) -> None:
    """Every event log callback of the controller sees each trial Ray queues first."""
    for callback in callbacks:
        if isinstance(callback, ResumeHooks):
            callback.trial_added(trial)


class ResumeHooks:
    """What :class:`~statemachine.tune.EventLogCallback` does at Ray's restore."""

    _session: LogSession | None
    _session_kind: str | None
    _tracker: TrialTracker
    _opened_for_requeue: bool
    resume_from_log: bool
    hook_errors: int

    def _ensure_log(self, trial: Any, trials: list[Any] | None = None) -> Recorder:
        raise NotImplementedError  # the callback's

    @_never_raises
    def restored(self, trials: list[Any], resume: dict[str, str] | None = None) -> None:
        """Ray restored ``trials`` from its saved state and is about to requeue them with the
        user's ``resume`` options: write what the log knows into them (:func:`.advance`)."""
        if self._session is not None or not trials:
            if resume is not None:
                self._tracker.resume = dict(resume)
            return
        self._session_kind = "restore"
        self._ensure_log(trials[0], trials)
        if resume is not None:  # the tracker of this driver session (the log is open)
            self._tracker.resume = dict(resume)
        self._opened_for_requeue = True
        self._tracker.from_ray_state.update(ray_trial.trial_id(t) for t in trials)
        advance(trials, self._tracker, enabled=self.resume_from_log)

    @_never_raises
    def trial_added(self, trial: Any) -> None:
        """Ray is about to queue ``trial``: one its search algorithm created again after a
        restore resumes from what the log knows (:func:`.advance_regenerated`)."""
        if self._session is not None and self._tracker.reconciled:
            advance_regenerated(trial, self._tracker, enabled=self.resume_from_log)
