"""After a driver crash: a trial Ray created after its last save, created again (issue 27).

A trial Ray created after its last save of the experiment state is not among the trials
``Tuner.restore`` brings back; Ray's search algorithm creates it again as it queues it (same id
and config, a new folder). Before Ray queues it (:mod:`statemachine.tune.ray_surface.requeue`'s
``install_add``), :func:`advance_regenerated` treats it as Ray would have treated the trial had
its saved state held it, with the user's ``Tuner.restore`` options (``resume_unfinished``,
``resume_errored``, ``restart_errored``: :attr:`TrialTracker.resume`, read at Ray's requeue):

- a trial the log saw end in ERROR stays ERROR (its last result, its error files and newest
  checkpoint, in its old folder), unless the user asked for ``resume_errored`` (queued again,
  ``TrialReset(from_scratch=False)``, resumed from its newest complete logged checkpoint in its
  old folder with the log's failure count, as Ray's requeue does) or ``restart_errored``
  (``TrialReset(from_scratch=True)``: from scratch in a new folder, counters from 0, as Ray's
  ``Trial.reset``; Ray would give it a new id, here it keeps its own);
- another end the log saw, one it keeps (:func:`.end_to_keep`), stays ended;
- an unfinished trial resumes from its newest complete logged checkpoint in its old folder,
  unless the user passed ``resume_unfinished=False`` (Ray's ``ResumeType.SKIP``: as Ray's
  requeue skips a restored unfinished trial, it is ended TERMINATED, not run, with its newest
  complete logged checkpoint and last result in its old folder, ``TrialStopped("not resumed
  by Tuner.restore")``) or a ``ResumeConfig(unfinished=RESTART)`` (from scratch in a new
  folder);
- otherwise (turned off, its old folder not found) it runs from scratch in a new folder.

Work the log holds that is redone is said, with why (``ResumeNotAdvanced``).
:func:`plan_regenerated` is the pure rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from statemachine.domain.events import ResumeNotAdvanced, TrialReset, TrialStopped
from statemachine.domain.state import TrialState
from statemachine.domain.status import Status
from statemachine.tune.ray_surface import trials as ray_trial
from statemachine.tune.reconcile import NOT_RESUMED
from statemachine.tune.resume_from_log import (
    LAST_RESULT,
    NO_RESULT,
    TURNED_OFF,
    ResumePlan,
    advance,
    end_to_keep,
    events_of,
    last_rows,
    write_into,
)
from statemachine.tune.tracking import REGENERATED, TrialTracker

__all__ = ["ADVANCE", "RESTART", "RESTART_ERRORED", "RESTART_UNFINISHED", "RESUME_ERRORED",
           "SCRATCH", "SKIP", "RegeneratedPlan", "advance_regenerated", "old_folder",
           "plan_regenerated"]

#: What :func:`advance_regenerated` does (``RegeneratedPlan.action``).
ADVANCE = "advance"
"""Point it at its old folder, keep its end or resume its newest complete checkpoint."""
RESUME_ERRORED = "resume errored"
"""``resume_errored``: ``TrialReset(from_scratch=False)``, then as :data:`ADVANCE`."""
RESTART = "restart"
"""``restart_errored``: ``TrialReset(from_scratch=True)``, from scratch in a new folder."""
SCRATCH = "scratch"
"""From scratch in a new folder, as under plain Ray."""
SKIP = "skip"
"""``resume_unfinished=False``: ended TERMINATED in its old folder, not run."""

#: Why the work the log knows is redone (``ResumeNotAdvanced.reason``).
RESTART_ERRORED = ("the user asked to restart errored trials from scratch "
                   "(Tuner.restore(restart_errored=True))")
RESTART_UNFINISHED = ("the user asked to restart unfinished trials from scratch "
                      "(ResumeConfig(unfinished=RESTART))")


@dataclass(frozen=True)
class RegeneratedPlan:
    """What to do with a trial Ray created again after a restore."""

    action: str
    """:data:`ADVANCE`, :data:`RESUME_ERRORED`, :data:`RESTART`, :data:`SKIP` or
    :data:`SCRATCH`."""
    reason: str | None = None
    """Why the log's work is redone (``ResumeNotAdvanced``), ``None`` if it is not."""


def plan_regenerated(status: Status, keep_end: bool, resume: Mapping[str, str], *,
                     enabled: bool = True, folder_found: bool = True) -> RegeneratedPlan:
    """The rule for a trial Ray created again, the log's ``status`` of it; ``keep_end``:
    its end is one a resume keeps (:func:`.end_to_keep`); ``resume``: the user's resume
    types (``unfinished``/``errored`` -> ``resume``/``restart``/``skip``). Pure."""
    if not enabled:
        return RegeneratedPlan(SCRATCH, TURNED_OFF)
    if status is Status.ERROR:
        errored = resume.get("errored", "skip")
        if errored == "restart":
            return RegeneratedPlan(RESTART, RESTART_ERRORED)
        if not folder_found:
            return RegeneratedPlan(SCRATCH, REGENERATED)
        return RegeneratedPlan(RESUME_ERRORED if errored == "resume" else ADVANCE)
    if status.is_terminal and not keep_end:
        return RegeneratedPlan(SCRATCH, REGENERATED)
    unfinished = resume.get("unfinished", "resume")
    if not status.is_terminal and unfinished == "restart":
        return RegeneratedPlan(SCRATCH, RESTART_UNFINISHED)
    if not status.is_terminal and unfinished == "skip" and folder_found:
        return RegeneratedPlan(SKIP)
    return RegeneratedPlan(ADVANCE) if folder_found else RegeneratedPlan(SCRATCH, REGENERATED)


def advance_regenerated(trial: Any, tracker: TrialTracker, *, enabled: bool = True) -> None:
    """Before Ray queues ``trial``: if its search algorithm created it again after a restore
    (:meth:`TrialTracker.regenerated`), apply :func:`plan_regenerated` to it (see the
    module's rules)."""
    state = tracker.regenerated(trial)
    if state is None:
        return
    events = events_of(tracker, trial)
    folder = old_folder(trial, state)
    # as the log had it before anything below is recorded (the fold's state moves on)
    ended, failures, newest = state.status.is_terminal, state.failures, state.latest_checkpoint
    plan = plan_regenerated(state.status, end_to_keep(events) if ended else True,
                            tracker.resume, enabled=enabled, folder_found=folder is not None)
    reason = plan.reason
    if plan.action == RESTART:
        tracker.requeue(trial, TrialReset(from_scratch=True))
    elif folder is not None and plan.action == SKIP:  # as Ray's requeue skips it
        ray_trial.point_to_folder(trial, folder)
        ray_trial.set_num_failures(trial, failures)
        write_into(trial, ResumePlan(finished="TERMINATED", newer=state.checkpoints), events)
        tracker.record(trial, TrialStopped(reason=NOT_RESUMED))
    elif folder is not None and plan.action in (ADVANCE, RESUME_ERRORED):
        ray_trial.point_to_folder(trial, folder)
        if plan.action == RESUME_ERRORED:
            tracker.requeue(trial, TrialReset(from_scratch=False))
        if ended:  # Ray's saved state would have held the trial's count
            ray_trial.set_num_failures(trial, failures)
        if (plan.action == ADVANCE and ended
                and not (ray_trial.read_trial_file(trial, LAST_RESULT)
                         or ray_trial.read_trial_file(trial, "result.json"))):
            reason = f"{folder}: {NO_RESULT}"
        else:
            advance([trial], tracker)
        if ray_trial.never_ran(trial):  # nothing advanced (advance said why): a new folder
            ray_trial.point_to_folder(trial, None)
    if reason is not None:
        tracker.record(trial, ResumeNotAdvanced(checkpoint=newest, reason=reason))


def old_folder(trial: Any, state: TrialState) -> str | None:
    """The trial's folder before the crash, under the experiment's folder: the one its newest
    logged checkpoint is in, else the only one whose name holds its id (Ray's default names
    ``<trainable>_<id>_<tag>_<time>``), else, for a trial the log saw end, the only one whose
    last result (:data:`.LAST_RESULT`, written by the callback as it ended) names its id: a
    ``trial_dirname_creator`` may leave the id out (one small read per folder)."""
    names = ray_trial.experiment_folder_names(trial)
    for path in reversed(state.checkpoints):
        parts = path.rstrip("/").rsplit("/", 2)
        if len(parts) == 3 and parts[1] in names:
            return parts[1]
    trial_id = ray_trial.trial_id(trial)
    marked = [name for name in names if f"_{trial_id}_" in f"_{name}_"]
    if len(marked) == 1 or not state.status.is_terminal:
        return marked[0] if len(marked) == 1 else None
    owned = [name for name in marked or names if (last_rows(ray_trial.read_experiment_file(
        trial, f"{name}/{LAST_RESULT}"))[0] or {}).get("trial_id") == trial_id]
    return owned[0] if len(owned) == 1 else None
