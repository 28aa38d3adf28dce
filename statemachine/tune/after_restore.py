"""After ``Tuner.restore``: the reconcile plan of each restored trial, applied to Ray and the log.

A new driver's first step holds the trials Ray restored from its experiment state, which may
be older than the event log (and never holds the restore-failure counter). For each trial,
:func:`statemachine.tune.reconcile.reconcile` (pure) says what to record and which budgets Ray
gets back; :func:`align_restored_trials` reads Ray's side, records the events, puts the
counters into Ray's trial and the node exclusion into its placement, and says in the driver's
log what it changed. An experiment that was moved or renamed continues its history
(``ExperimentRenamed`` in every trial the log knew).

This is where a resume from the log's knowledge goes (issue 27: a trial the log saw finish
stays finished, a running trial resumes from its newest complete checkpoint): a plan from the
pure side, written into Ray's trial through :mod:`statemachine.tune.ray_surface`.
"""

from __future__ import annotations

import logging
from typing import Any

from statemachine.domain.events import ExperimentRenamed
from statemachine.log.credentials import redact_uri
from statemachine.log.records import storable_name
from statemachine.tune.avoidance import NodeAvoidance
from statemachine.tune.ray_surface import trials as ray_trial
from statemachine.tune.reconcile import reconcile
from statemachine.tune.tracking import TrialTracker

logger = logging.getLogger(__name__)

__all__ = ["align_restored_trials"]


def align_restored_trials(trials: list[Any], tracker: TrialTracker, experiment: str,
                          avoidance: NodeAvoidance | None) -> None:
    """Align the log and Ray's restored ``trials`` (the log is open), put budgets back.

    ``experiment``: the experiment's name now; ``avoidance``: the node avoidance in force, if
    the policy asks for it.
    """
    recorder = tracker.recorder
    if recorder is None:
        raise RuntimeError("statemachine: the event log is not open yet")
    renamed = recorder.log.renamed_from if recorder.log is not None else None
    if renamed is not None:
        _record_rename(trials, tracker, experiment, renamed)
    for trial in trials:
        known = tracker.state(trial) is not None
        state = tracker.track(trial)
        if state is None:
            continue
        trial_id = ray_trial.trial_id(trial)
        tracker.remember(trial)
        ray_failures = ray_trial.num_failures(trial)
        current = ray_trial.current_checkpoint(trial)
        plan = reconcile(state, ray_trial.status(trial), ray_failures, current, known=known,
                         ray_fresh=ray_trial.never_ran(trial) and not restored_by_ray(
                             trial, tracker))
        if plan.event is not None:
            tracker.record(trial, plan.event)
        if plan.adopted is not None:
            logger.warning(
                "statemachine: trial %s: num_failures %d adopted from %s (the event log "
                "%s)", trial_id, plan.adopted.failures, plan.adopted.source,
                f"counted {state.failures}" if known else "did not know the trial")
            tracker.record(trial, plan.adopted)
        elif plan.error_in_ray_only:
            logger.warning("statemachine: trial %s is ERROR in Ray but %s in the log",
                           trial_id, state.status)
        if plan.failures is not None:
            logger.warning(
                "statemachine: trial %s: num_failures %d from the event log (Ray's "
                "experiment state said %d)", trial_id, plan.failures, ray_failures,
            )
            ray_trial.set_num_failures(trial, plan.failures)
        if plan.restore_failures is not None:
            logger.warning(
                "statemachine: trial %s: %d restore failure(s) of checkpoint %s already "
                "spent before the driver restarted", trial_id, plan.restore_failures,
                current,
            )
            ray_trial.set_restore_failures(trial, plan.restore_failures)
        if avoidance is not None:
            avoidance.restore_placement(trial)


#: What Ray writes into a trial's folder once the trial has started (``params.json`` at its
#: start, ``result.json`` with its results, ``error.txt`` at a failure, its checkpoints).
_RAN_MARKERS = ("params.json", "result.json", "error.txt", "progress.csv")


def restored_by_ray(trial: Any, tracker: TrialTracker) -> bool:
    """Whether Ray's trial is the one it restored from its saved experiment state (seen by
    the requeue hook, :mod:`.ray_surface.requeue`) or its folder shows it ran: the same trial
    as before the restart, even where Ray's state is older than its first failure (PENDING,
    no result, no failure), not a new trial behind a reused id."""
    return ray_trial.trial_id(trial) in tracker.from_ray_state or left_traces(trial)


def left_traces(trial: Any) -> bool:
    """Whether Ray's trial folder shows the trial ran, whatever Ray's saved state says: a
    trial restored from a snapshot older than its first failure looks new to Ray (PENDING,
    no result, no failure) but keeps its folder; a new trial behind a reused id gets a new
    folder (Ray never reuses an existing trial folder's name)."""
    return any(name in _RAN_MARKERS or name.startswith("checkpoint_")
               for name in ray_trial.trial_folder_names(trial))


def _record_rename(trials: list[Any], tracker: TrialTracker, experiment: str,
                   renamed: tuple[str, str | None]) -> None:
    """The experiment continues under its new name: say so in every restored trial."""
    old_name, old_path = renamed
    new_path = redact_uri(ray_trial.experiment_path(trials[0]))
    print(f"statemachine: experiment {storable_name(old_name)} continues as "
          f"{experiment} (moved or renamed; its event log history is kept)", flush=True)
    for trial in trials:
        if tracker.state(trial) is not None:
            tracker.record(trial, ExperimentRenamed(
                old_name=old_name, new_name=storable_name(experiment),
                old_storage_path=old_path, new_storage_path=new_path))
