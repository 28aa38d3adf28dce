"""The moment between Ray's restore of an experiment's state and its requeue of the trials.

``TuneController.resume`` (called from its ``__init__`` by ``Tuner.restore``) rebuilds every
trial from the newest ``experiment_state-*.json``, then ``_requeue_restored_trials(trials,
resume_config)`` decides by each trial's status whether it runs again (``resume_unfinished``,
``resume_errored``, ``restart_errored``). :func:`install` wraps that private method (the same
name, signature and use in Ray 2.40.0 and 2.60.0) so the callbacks given to the controller see
the restored trials first, and can write what the event log knows into them (a newer end, a
newer checkpoint: :mod:`statemachine.tune.resume_from_log`); Ray's requeue then applies the
user's resume options to what they wrote. Reads ``controller._callbacks._callbacks`` (the
``CallbackList``'s list, same in both) and the ``resume_config``'s ``finished``,
``unfinished`` and ``errored`` (``ResumeConfig.ResumeType`` members, values ``"resume"``,
``"restart"``, ``"skip"``; same in both), handed to the hook as plain strings
(:func:`resume_types`): what ``Tuner.restore(resume_unfinished=, resume_errored=,
restart_errored=)`` asked for, which the hook applies to the trials Ray creates again later.
Installed once per process, idempotently; a hook that raises is reported, never stops the
restore.

A trial the hook ended (kept TERMINATED or ERROR as the log saw it) was live in the search
algorithm's restored state, saved with Ray's older experiment state: after Ray's requeue, each
one still ended is reported to ``controller._search_alg.on_trial_complete(trial_id, result,
error)`` (same in both), as Ray does when a trial ends; otherwise a searcher that limits
concurrency (``TuneConfig(max_concurrent_trials)``) waits for it forever.

A trial Ray created after its last save is not among the restored trials: Ray's search
algorithm creates it again (same id and config) and ``TuneController.add_trial(trial)`` (same
name, signature and body in both) queues it. :func:`install_add` wraps that method so the
callbacks see each trial first, before Ray tracks its status, and can point it at the folder
and checkpoint the log knows (:func:`statemachine.tune.resume_from_log.advance_regenerated`);
a trial the hook ended is reported to the search algorithm after the add, as above.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["RESUME_DEFAULTS", "install", "install_add", "installed", "resume_types"]

_MARK = "__statemachine_requeue__"
_ADD_MARK = "__statemachine_add_trial__"
_ENDED = ("TERMINATED", "ERROR")

#: Ray's ``ResumeConfig()`` defaults, as :func:`resume_types` gives them (what
#: ``Tuner.restore`` asks for without options).
RESUME_DEFAULTS = {"finished": "skip", "unfinished": "resume", "errored": "skip"}

#: Called with (the controller's callbacks, the restored trials, :func:`resume_types` of the
#: user's resume config) before Ray requeues them.
RequeueHook = Callable[[list[Any], list[Any], dict[str, str]], None]
#: Called with (the controller's callbacks, the trial) before Ray adds a trial to its queue.
AddHook = Callable[[list[Any], Any], None]


def installed() -> bool:
    """Whether the requeue hook is in place."""
    from ray.tune.execution.tune_controller import TuneController

    return hasattr(TuneController._requeue_restored_trials, _MARK)


def install(hook: RequeueHook) -> None:
    """Call ``hook(callbacks, trials)`` before every ``_requeue_restored_trials``."""
    from ray.tune.execution.tune_controller import TuneController

    if installed():
        return
    original = TuneController._requeue_restored_trials

    @functools.wraps(original)
    def requeue(self: Any, trials: list[Any], resume_config: Any) -> Any:
        before = [(trial, trial.status) for trial in trials]
        try:
            callbacks = list(getattr(self._callbacks, "_callbacks", []) or [])
            hook(callbacks, list(trials), resume_types(resume_config))
        except Exception:  # never stops Ray's restore
            logger.exception("statemachine: reading the restored trials failed; Ray's saved "
                             "state is used as it is")
        ended = [t for t, status in before if t.status != status and t.status in _ENDED]
        requeued = original(self, trials, resume_config)
        for trial in ended:
            if trial.status in _ENDED:  # not resumed (resume_errored) by the requeue
                _report_end(self, trial)
        return requeued

    setattr(requeue, _MARK, True)
    TuneController._requeue_restored_trials = requeue  # type: ignore[method-assign]


def resume_types(resume_config: Any) -> dict[str, str]:
    """What the user's ``ResumeConfig`` does with each kind of restored trial: ``finished``,
    ``unfinished``, ``errored`` -> ``"resume"``, ``"restart"`` or ``"skip"`` (Ray's default
    where it does not say)."""
    types = dict(RESUME_DEFAULTS)
    for kind in types:
        value = getattr(resume_config, kind, None)
        value = getattr(value, "value", value)
        if isinstance(value, str) and value in ("resume", "restart", "skip"):
            types[kind] = value
    return types


def install_add(hook: AddHook) -> None:
    """Call ``hook(callbacks, trial)`` before every ``TuneController.add_trial``."""
    from ray.tune.execution.tune_controller import TuneController

    if hasattr(TuneController.add_trial, _ADD_MARK):
        return
    original = TuneController.add_trial

    @functools.wraps(original)
    def add_trial(self: Any, trial: Any) -> Any:
        before = trial.status
        try:
            hook(list(getattr(self._callbacks, "_callbacks", []) or []), trial)
        except Exception:  # never stops Ray's run
            logger.exception("statemachine: reading trial %s before Ray queued it failed",
                             getattr(trial, "trial_id", "?"))
        added = original(self, trial)
        if trial.status != before and trial.status in _ENDED:
            _report_end(self, trial)
        return added

    setattr(add_trial, _ADD_MARK, True)
    TuneController.add_trial = add_trial  # type: ignore[method-assign]


def _report_end(controller: Any, trial: Any) -> None:
    """Tell the controller's search algorithm that ``trial`` ended, as Ray does."""
    try:
        controller._search_alg.on_trial_complete(
            trial.trial_id, result=dict(trial.last_result or {}),
            error=trial.status == _ENDED[1])
    except Exception:  # a searcher that refuses it: Ray's run goes on as it can
        logger.exception("statemachine: could not tell the search algorithm that trial %s "
                         "ended", trial.trial_id)
