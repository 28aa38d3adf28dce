"""After a driver crash: resume each trial from what the event log knows (issue 27).

Ray saves its experiment state every few seconds to minutes; ``Tuner.restore`` resumes from the
newest save, so everything after it is redone: a trial that finished after the save runs
again, a running trial restores from an older checkpoint than the newest it wrote. The log
records every checkpoint and every end durably. Between Ray's restore of its state and its
requeue of the trials (:mod:`statemachine.tune.ray_surface.requeue`), for each trial whose
whole history the log holds:

- an end the log saw (``TERMINATED``, ``ERROR``) that Ray's state missed is written into Ray's
  trial, with its last result (:data:`LAST_RESULT`, written as it completed, or the last row
  of the trial folder's ``result.json``) and its newer checkpoints: a finished trial is not
  run again, and Ray's requeue then applies the user's ``resume_errored``/``restart_errored``
  to an ERROR trial as it would have;
- a trial still running resumes from the newest checkpoint the log recorded whose folder is
  complete on the experiment's storage, with the metrics Ray reported with it
  (``training_iteration``) and Ray's checkpoint bookkeeping replayed.

A trial Ray created after its last save is not among the restored trials; Ray's search
algorithm creates it again (same id and config, a new folder) as it queues it:
:func:`statemachine.tune.resume_regenerated.advance_regenerated` points it at its old folder
first, then applies the same rules, with the user's ``Tuner.restore`` options.

Each adjustment is recorded (``ResumeAdvanced``), and so is newer work that is redone anyway,
with why (``ResumeNotAdvanced``). :func:`plan_resume` is the pure rule; :func:`advance` reads
Ray's side and applies it. Neither changes a counter or a decision: the events change nothing
in the fold, and the failure counters are :mod:`statemachine.tune.reconcile`'s.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from statemachine.domain.events import (
    CheckpointSaved,
    Event,
    ResumeAdvanced,
    ResumeNotAdvanced,
    TrialCompleted,
    TrialFailed,
    TrialStopped,
)
from statemachine.domain.state import TrialState
from statemachine.domain.status import Status
from statemachine.tune.ray_surface import checkpoint_manager as ray_checkpoints
from statemachine.tune.ray_surface import trials as ray_trial
from statemachine.tune.reconcile import ENDED_WITH_EXPERIMENT, STOPPED_BY_TUNE
from statemachine.tune.tracking import TrialTracker

logger = logging.getLogger(__name__)

__all__ = ["ERROR_FILES", "LAST_RESULT", "ResumePlan", "advance", "end_to_keep", "events_of",
           "last_rows", "plan_resume", "save_error", "save_last_result", "write_into"]

#: The trial's last result, written by the callback into the trial's folder on storage as it
#: completes (:func:`save_last_result`): Ray copies ``result.json`` to storage only with its
#: experiment state, so after a crash a trial that ended since has no rows there.
LAST_RESULT = "statemachine_last_result.json"

#: Ray's error files of a trial (``error.txt``, ``error.pkl``, written by ``handle_error`` in
#: the driver's staging folder and copied to storage only with the experiment state) -> the
#: copies the callback writes into the trial's folder on storage as it errors for good
#: (:func:`save_error`), which a trial kept ERROR after a crash is given if Ray's are missing.
ERROR_FILES = {"error.txt": "statemachine_error.txt", "error.pkl": "statemachine_error.pkl"}

#: Why newer work the log knows is redone anyway (``ResumeNotAdvanced.reason``).
TURNED_OFF = "the user turned it off (EventLogCallback(resume_from_log=False))"
PART_HISTORY = "the event log does not hold the trial's whole history"
NOT_COMPLETE = "its folder on the experiment's storage is missing or empty"
NO_METRICS = ("the log does not know the iteration it was saved at (recorded by an older "
              "statemachine), nor do Ray's result rows")
UNKNOWN_PATH = "the checkpoint Ray restores is not one the log recorded"
NO_RESULT = "its last result is not in its folder on the experiment's storage"

_UNFINISHED = ("PENDING", "RUNNING", "PAUSED")


@dataclass(frozen=True)
class ResumePlan:
    """What to write into one restored trial (see the module's rules)."""

    finished: str | None = None
    """The end to give Ray's trial (``TERMINATED``, ``ERROR``), or ``None``."""
    newer: tuple[str, ...] = ()
    """The log's checkpoints after the one Ray would restore, oldest first, to check."""
    reason: str | None = None
    """Why nothing is advanced although the log knows newer work (``None``: nothing newer,
    or it is advanced)."""


def end_to_keep(events: list[Event]) -> bool:
    """Whether the trial's last end is one a resume keeps: it completed, failed for good, was
    stopped by its scheduler (``on_trial_complete`` of a trial not running) or skipped by an
    earlier ``Tuner.restore``; not a stop of the whole experiment (the end of an aborted
    driver stops what is left, which Ray's older state still has queued and a resume runs, as
    Ray would: ``the experiment ended``, ``stopped by Tune``)."""
    for event in reversed(events):
        if isinstance(event, (TrialCompleted, TrialFailed)):
            return True
        if isinstance(event, TrialStopped):
            return event.reason not in (ENDED_WITH_EXPERIMENT, STOPPED_BY_TUNE)
    return False


def plan_resume(state: TrialState, ray_status: str, ray_checkpoint: str | None,
                ray_num_failures: int, *, enabled: bool = True,
                keep_end: bool = True) -> ResumePlan:
    """What the log knows beyond Ray's restored state, for one trial the log holds.

    ``ray_status``, ``ray_checkpoint``, ``ray_num_failures``: Ray's restored trial;
    ``keep_end``: the log's end is one to keep (:func:`end_to_keep`). Pure.
    """
    finished: str | None = None
    if (state.status in (Status.TERMINATED, Status.ERROR) and ray_status in _UNFINISHED
            and keep_end):
        finished = state.status.value
    elif state.status.is_terminal and not keep_end:
        return ResumePlan()  # Ray runs it again, from its own state, as without the crash
    logged = state.checkpoints
    if ray_checkpoint is None:
        newer = logged
    elif ray_checkpoint in logged:
        newer = logged[logged.index(ray_checkpoint) + 1:]
    else:
        return ResumePlan(reason=UNKNOWN_PATH if (logged or finished) else None)
    if not newer and finished is None:
        return ResumePlan()
    if not enabled:
        return ResumePlan(newer=newer, reason=TURNED_OFF)
    if ray_num_failures > state.failures:
        return ResumePlan(newer=newer, reason=PART_HISTORY)
    return ResumePlan(finished=finished, newer=newer)


def last_rows(text: bytes | None) -> tuple[dict[str, Any] | None, dict[str, dict[str, Any]]]:
    """The last row of a ``result.json`` (JSON lines) and, per checkpoint folder name, the
    last row that names it (``checkpoint_dir_name``: function trainables). A torn last line
    (the crash) is skipped."""
    last: dict[str, Any] | None = None
    named: dict[str, dict[str, Any]] = {}
    for line in (text or b"").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if not isinstance(row, dict):
            continue
        last = row
        name = row.get("checkpoint_dir_name")
        if isinstance(name, str) and name:
            named[name] = row
    return last, named


def _name(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def _iteration(row: dict[str, Any] | None) -> int:
    value = (row or {}).get("training_iteration")
    return value if type(value) is int else 0


@dataclass
class _Applied:
    checkpoints: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    missing: str | None = None


def _checked(trial: Any, plan: ResumePlan, last: dict[str, Any] | None,
             named: dict[str, dict[str, Any]], iterations: dict[str, int]) -> _Applied:
    """The newer checkpoints that are complete and whose metrics are known, in order; a
    training trial stops at the first that is not (later ones would skip it).

    The metrics Ray restores a checkpoint with (its ``training_iteration``: where training
    continues) come from the row of ``result.json`` that names it, else from the log's
    ``CheckpointSaved.iteration`` (Ray copies ``result.json`` to storage with its experiment
    state, so after a crash the rows of the last minutes are often not there).
    """
    applied = _Applied()
    for path in plan.newer:
        files = ray_trial.folder_files(trial, path)
        row = named.get(_name(path))
        if row is None and path in iterations:
            row = {"training_iteration": iterations[path]}
        if row is None and plan.finished and path == plan.newer[-1]:
            row = last  # the final checkpoint of an ended trial: its last result
        if not files or row is None:
            applied.missing = NOT_COMPLETE if not files else NO_METRICS
            applied.missing = f"{_name(path)}: {applied.missing}"
            if not plan.finished:
                break
            continue
        applied.checkpoints.append((path, row))
    return applied


def write_into(trial: Any, plan: ResumePlan,
               events: list[Event]) -> tuple[_Applied, dict[str, Any] | None]:
    """Write ``plan`` into Ray's trial: its newer checkpoints that are complete, and the end
    ``plan.finished`` with the trial's last result (and error files); ``events``: the log's
    events of the trial. Returns what was applied, and the last result given."""
    last, named = last_rows(ray_trial.read_trial_file(trial, "result.json"))
    if plan.finished is not None:
        saved, _ = last_rows(ray_trial.read_trial_file(trial, LAST_RESULT))
        last = saved if saved and _iteration(saved) >= _iteration(last) else last
    applied = _checked(trial, plan, last, named, _iterations(events))
    if applied.checkpoints:
        ray_checkpoints.advance_to(trial, applied.checkpoints)
    if plan.finished is not None:
        if last is None and applied.checkpoints:  # result.json not on storage yet
            last = {**ray_trial.last_result(trial), **applied.checkpoints[-1][1]}
            last.setdefault("config", ray_trial.config(trial))  # as in Ray's result rows
            last.setdefault("trial_id", ray_trial.trial_id(trial))
        _finish(trial, plan.finished, last)
    return applied, last


def advance(trials: list[Any], tracker: TrialTracker, *, enabled: bool = True) -> None:
    """Write what the log knows into the trials Ray has just restored (the log is open)."""
    for trial in trials:
        state = tracker.state(trial)
        if state is None:
            continue  # not in the log: Ray's saved state is all there is
        ray_from = ray_trial.current_checkpoint(trial)
        events = events_of(tracker, trial) if state.status.is_terminal else []
        plan = plan_resume(state, ray_trial.status(trial), ray_from,
                           ray_trial.num_failures(trial), enabled=enabled,
                           keep_end=end_to_keep(events) if state.status.is_terminal else True)
        if plan.reason is not None:
            tracker.record(trial, ResumeNotAdvanced(
                checkpoint=state.latest_checkpoint, reason=plan.reason))
            continue
        if plan.finished is None and not plan.newer:
            continue
        before = _iteration(ray_checkpoints.checkpoint_metrics(trial))
        applied, last = write_into(trial, plan, events or events_of(tracker, trial))
        if plan.finished is not None:
            after = _iteration(last) if last else before
        elif applied.checkpoints:
            after = _iteration(applied.checkpoints[-1][1])
        else:
            after = before
        to = applied.checkpoints[-1][0] if applied.checkpoints else ray_from
        if plan.finished is not None or applied.checkpoints:
            tracker.record(trial, ResumeAdvanced(
                from_checkpoint=ray_from, to_checkpoint=to,
                iterations_saved=max(after - before, 0), finished=plan.finished))
            logger.warning("statemachine: trial %s: Ray's saved state was %d iteration(s) "
                           "older than the event log; %s", ray_trial.trial_id(trial),
                           max(after - before, 0),
                           f"kept {plan.finished}" if plan.finished else f"resumed from {to}")
        if applied.missing is not None:
            tracker.record(trial, ResumeNotAdvanced(checkpoint=state.latest_checkpoint,
                                                    reason=applied.missing))


def save_last_result(trial: Any) -> None:
    """Write the trial's last result (JSON, as Ray's ``result.json`` rows) to
    :data:`LAST_RESULT` in its folder on storage, for a resume after a crash."""
    row = ray_trial.last_result(trial)
    if row and not ray_trial.write_trial_file(
            trial, LAST_RESULT, json.dumps(row, default=str).encode()):
        logger.warning("statemachine: trial %s: could not write its last result to %s",
                       ray_trial.trial_id(trial), LAST_RESULT)


def save_error(trial: Any) -> None:
    """Copy the error files Ray wrote for ``trial`` in the driver's staging folder to
    :data:`ERROR_FILES` in its folder on storage, with its last result, for a resume after a
    crash (the trial errored for good)."""
    save_last_result(trial)
    for name, data in ray_trial.local_error_files(trial).items():
        if name in ERROR_FILES and not ray_trial.write_trial_file(trial, ERROR_FILES[name],
                                                                  data):
            logger.warning("statemachine: trial %s: could not write %s",
                           ray_trial.trial_id(trial), ERROR_FILES[name])


def events_of(tracker: TrialTracker, trial: Any) -> list[Event]:
    """The events the log holds for ``trial`` (``[]``: the log is not open)."""
    recorder = tracker.recorder
    return recorder.events(ray_trial.trial_id(trial)) if recorder is not None else []


def _iterations(events: list[Event]) -> dict[str, int]:
    """The iteration of each checkpoint the log recorded it for (the newest record wins)."""
    return {event.checkpoint: event.iteration for event in events
            if isinstance(event, CheckpointSaved) and event.iteration is not None}


def _finish(trial: Any, status: str, last: dict[str, Any] | None) -> None:
    """Give Ray's trial the end the log saw, with its last result and error files."""
    ray_trial.set_restored_status(trial, status)
    if last is not None:
        ray_trial.set_last_result(trial, last)
    if status == "ERROR":
        names = set(ray_trial.trial_folder_names(trial))
        found = [ray if ray in names else ours if ours in names else None
                 for ray, ours in ERROR_FILES.items()]
        ray_trial.set_error_files(trial, found[0], found[1])
