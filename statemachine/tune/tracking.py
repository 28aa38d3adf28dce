"""Which trial of the event log each of Ray's trials is, and recording events for it.

A trial enters the log with ``TrialAdded`` (its config, JSON-safe) the first time the driver
sees it. After the driver's first step has aligned the log with the trials ``Tuner.restore``
brought back (:mod:`statemachine.tune.after_restore`), another Ray ``Trial`` object behind the
id of a trial that ended, one that never ran, is a new trial reusing the id: recorded as a new
incarnation (``TrialRecreated``).

A trial Ray created after its last save of the experiment state is not among the trials
``Tuner.restore`` brings back: Ray's search algorithm (its state saved at the same time)
creates it again, with the same id and config but a new folder (Ray names it with the time),
and it would run from scratch. Ray's ``add_trial`` shows it to the callback first
(:func:`~statemachine.tune.ray_surface.requeue.install_add`), which points it at its old folder
and newest complete checkpoint, or keeps it finished, with the user's resume options
(:attr:`TrialTracker.resume`; :func:`~statemachine.tune.resume_regenerated.advance_regenerated`,
through :meth:`TrialTracker.regenerated`). Where that is impossible (its folder is not found,
turned off), ``ResumeNotAdvanced`` says why the work the log holds for it (a checkpoint, an
end) is redone (:data:`REGENERATED`; recorded here, the first time the driver sees it, if no
add hook saw it first); an ended one is then a new incarnation as above. Everything the
callback, the steering and the node avoidance record goes through :meth:`TrialTracker.record`.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from statemachine.domain.events import Event, ResumeNotAdvanced, TrialAdded, TrialRecreated
from statemachine.domain.machine import TransitionRecord
from statemachine.domain.state import TrialState
from statemachine.tune.ray_surface import trials as ray_trial
from statemachine.tune.ray_surface.requeue import RESUME_DEFAULTS
from statemachine.tune.reconcile import REUSED_ID
from statemachine.tune.recorder import Recorder

logger = logging.getLogger(__name__)

__all__ = ["REGENERATED", "TrialTracker", "json_safe"]

#: Why the work the log knows for a trial Ray created after its last save is redone.
REGENERATED = ("Ray's saved experiment state predates the trial: its search algorithm "
               "created it again after the restore (same id, a new folder) and it runs from "
               "scratch")


def json_safe(config: Any) -> dict[str, Any]:
    """A JSON-safe copy of a trial config (anything unusual becomes its ``repr``)."""
    try:
        data = json.loads(json.dumps(config, default=repr, sort_keys=True))
    except (TypeError, ValueError):
        return {"repr": repr(config)}
    if not isinstance(data, dict):
        return {"value": data}
    return {str(key): value for key, value in data.items()}


class TrialTracker:
    """The trials of one driver session as the log knows them.

    The log is opened by the callback at the first trial (:attr:`recorder` is ``None`` until
    then); :meth:`track` and :meth:`record` need it open, :meth:`state` does not.
    """

    def __init__(self) -> None:
        self.recorder: Recorder | None = None
        """What records into the log, once the callback has opened it."""
        self.reconciled = False
        """The driver's first step has aligned the log with Ray's restored trials: from then
        on a new Ray trial behind an ended trial's id is a new incarnation."""
        self.from_ray_state: set[str] = set()
        """Ids of the trials Ray restored from its saved experiment state (``Tuner.restore``):
        the same trials as before the restart, never new ones behind a reused id."""
        # the Ray Trial object recorded behind each id (a new object: maybe a new trial)
        self.resume: dict[str, str] = dict(RESUME_DEFAULTS)
        """What the user's ``Tuner.restore`` options do with each kind of restored trial
        (``finished``/``unfinished``/``errored`` -> ``resume``/``restart``/``skip``), read at
        Ray's requeue; applied to the trials Ray creates again later."""
        self._objects: dict[str, int] = {}
        self._regenerated: set[str] = set()
        self._trials_seen = 0

    def _open(self) -> Recorder:
        if self.recorder is None:
            raise RuntimeError("statemachine: the event log is not open yet")
        return self.recorder

    def state(self, trial: Any) -> TrialState | None:
        """The trial's folded state (with events not yet written), ``None`` if not in the log."""
        return self.recorder.state(ray_trial.trial_id(trial)) if self.recorder else None

    def track(self, trial: Any) -> TrialState | None:
        """Make sure the trial is in the log (``TrialAdded``); returns its state."""
        recorder = self._open()
        trial_id = ray_trial.trial_id(trial)
        state = recorder.state(trial_id)
        if state is None:
            recorder.record(trial_id, TrialAdded(config=json_safe(ray_trial.config(trial))))
            state = recorder.state(trial_id)
        elif self._is_regenerated(trial_id, trial, state):
            self._regenerated.add(trial_id)
            logger.warning("statemachine: trial %s was created after Ray's last save of the "
                           "experiment state: it runs again from scratch although the log "
                           "holds its work", trial_id)
            recorder.record(trial_id, ResumeNotAdvanced(checkpoint=state.latest_checkpoint,
                                                        reason=REGENERATED))
            state = recorder.state(trial_id)
        if state is not None and (self.reconciled and self._objects.get(trial_id) != id(trial)
                and state.status.is_terminal and ray_trial.never_ran(trial)):
            # Another Ray trial behind the id of an ended one: a new incarnation of the id.
            logger.warning("statemachine: trial %s is a new trial behind the id of one that "
                           "ended %s: recorded as a new incarnation", trial_id, state.status)
            recorder.record(trial_id, TrialRecreated(
                config=json_safe(ray_trial.config(trial)), reason=REUSED_ID))
            state = recorder.state(trial_id)
        if self.reconciled:
            self._objects[trial_id] = id(trial)
        return state

    def regenerated(self, trial: Any) -> TrialState | None:
        """The log's state of ``trial`` if it is one Ray's search algorithm created again after
        a restore, for an id whose work the log holds (``None`` otherwise); seen once per id:
        the caller records what it does with it."""
        if not self.from_ray_state:  # not after a restore: nothing is created again
            return None
        trial_id = ray_trial.trial_id(trial)
        state = self.state(trial)
        if state is None or not self._is_regenerated(trial_id, trial, state):
            return None
        self._regenerated.add(trial_id)
        return state

    def _is_regenerated(self, trial_id: str, trial: Any, state: TrialState) -> bool:
        """Whether ``trial`` is one Ray's search algorithm created again after a restore, for
        an id whose work the log holds (seen once per id)."""
        return (bool(self.from_ray_state) and trial_id not in self.from_ray_state
                and trial_id not in self._regenerated and trial_id not in self._objects
                and (bool(state.checkpoints) or state.status.is_terminal)
                and ray_trial.never_ran(trial))

    def remember(self, trial: Any) -> None:
        """``trial`` is the Ray object behind its id (a restored trial, while reconciling)."""
        self._objects[ray_trial.trial_id(trial)] = id(trial)

    def record(self, trial: Any, event: Event) -> TransitionRecord | None:
        """Track the trial, then fold and record ``event`` (``None``: the fold refused it)."""
        self.track(trial)
        return self._open().record(ray_trial.trial_id(trial), event)

    def requeue(self, trial: Any, event: Event) -> None:
        """Record how Ray queues ``trial`` again (``TrialReset``) before :meth:`track` would
        take it for a new trial behind an ended one's id; it is the Ray object behind its id."""
        self._open().record(ray_trial.trial_id(trial), event)
        if self.reconciled:
            self._objects[ray_trial.trial_id(trial)] = id(trial)

    def has_new(self, trials: list[Any]) -> bool:
        """Whether Tune's list of trials changed since :meth:`track_new` last looked."""
        return len(trials) != self._trials_seen

    def track_new(self, trials: list[Any]) -> None:
        """Add trials created since the last look (Tune only appends to its list)."""
        if self.has_new(trials):
            for trial in trials:
                self.track(trial)
            self._trials_seen = len(trials)
