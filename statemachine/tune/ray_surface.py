"""Every piece of Ray this package reads, writes, wraps or imports, in one place.

The rest of :mod:`statemachine.tune` never touches an attribute of a Ray object: it calls the
functions here, so the Ray surface the project depends on can be audited and version-gated in
this one file (``tests/tune/test_tune_units.py`` fails if another module reaches into Ray's
internals). Each access below was checked in the source of Ray 2.40.0 and Ray 2.60.0, the
oldest and the newest supported versions, and is exercised on both by ``.ci/run``
(``compat.TESTED_RAY``). "Same" means same name, type and meaning in both.

Reads and writes on ``ray.tune.experiment.Trial`` (DeveloperAPI) and what it holds:

- ``trial.trial_id``, ``.status``, ``.config``, ``.max_failures`` (read): :func:`trial_id`,
  :func:`status`, :func:`config`, :func:`max_failures`. Same.
- ``trial.storage`` (``ray.train._internal.storage.StorageContext``, internal):
  ``.experiment_dir_name``, ``.experiment_fs_path``, ``.trial_fs_path``,
  ``.storage_filesystem`` (read): :func:`experiment_name`, :func:`experiment_path`,
  :func:`trial_path`, :func:`storage_filesystem`. Same.
- ``trial.error_file`` (property, read): :func:`error_file`. Same.
- ``trial.is_restoring`` (property: ``temporary_state.restoring_from is not None``, read):
  :func:`is_restoring`. Same.
- ``trial.run_metadata.num_failures`` (read and written): :func:`num_failures`,
  :func:`set_num_failures`. Same.
- ``trial.temporary_state.num_restore_failures`` (written; never saved by Ray):
  :func:`set_restore_failures`. Same.
- ``trial.latest_checkpoint_result`` (property: the manager's latest result, else
  ``trial._restore_checkpoint_result``) and its ``.checkpoint.path`` (read):
  :func:`current_checkpoint`. Same.
- ``trial.run_metadata.checkpoint_manager`` (``ray.train._internal.checkpoint_manager.
  _CheckpointManager``, internal): ``.best_checkpoint_results`` (read),
  ``._latest_checkpoint_result`` and ``._checkpoint_results`` (private, written);
  ``trial._restore_checkpoint_result`` (private, written); ``run_metadata.invalidate_cache()``
  and ``trial.invalidate_json_state()`` (called): :func:`checkpoint_paths`,
  :func:`forget_checkpoints`, :func:`restore_from`. Same.
- ``ray.train.Checkpoint(path, filesystem)`` and
  ``ray.train._internal.session._TrainingResult(checkpoint, metrics)`` (internal; built to
  point Ray at an older checkpoint): :func:`restore_from`. Same.
- ``Checkpoint.path`` of what ``Callback.on_checkpoint`` receives: :func:`checkpoint_path`.
  Same.

Methods of ``Trial`` wrapped in place (the error seam, :data:`SEAM_METHODS`):
``handle_error(exc=None)``, ``on_restore()``, ``set_status(status)``, ``should_recover()``:
:func:`wrap_trial_methods`. Same signatures and call order in both; that they exist is
checked when :mod:`statemachine.tune` is imported (:func:`missing_trial_methods`).

Public classes whose home differs: ``RunConfig``, ``FailureConfig``, ``CheckpointConfig``
for ``tune.Tuner`` are only in ``ray.train`` in 2.40; 2.60 has them in ``ray.tune`` and emits a
``RayDeprecationWarning`` when ``ray.train``'s are passed to a ``Tuner``. This module exports
the ones of the installed Ray.

Outside this module Ray is used only through public names: ``ray.tune.Callback`` (base of
:class:`~statemachine.tune.EventLogCallback`), ``ray.__version__`` (:mod:`.compat`), and
``ray.exceptions.RayTaskError``/``RayActorError`` (``.cause``, ``.preempted``,
``.traceback_str``) in :func:`statemachine.domain.classify`, which imports them lazily.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from ray.tune.experiment import Trial

if TYPE_CHECKING:
    from ray.train._internal.checkpoint_manager import _CheckpointManager
    from ray.train._internal.storage import StorageContext
    from ray.tune import CheckpointConfig, FailureConfig, RunConfig
else:
    try:  # Ray 2.60 (and every version with them in ray.tune): these are the Tuner's own
        from ray.tune import CheckpointConfig, FailureConfig, RunConfig
    except ImportError:  # Ray 2.40 keeps them under ray.train only
        from ray.train import CheckpointConfig, FailureConfig, RunConfig

__all__ = [
    "SEAM_METHODS",
    "CheckpointConfig",
    "FailureConfig",
    "RunConfig",
    "Trial",
    "TrialMethodHooks",
    "checkpoint_path",
    "checkpoint_paths",
    "config",
    "current_checkpoint",
    "error_file",
    "experiment_name",
    "experiment_path",
    "forget_checkpoints",
    "is_restoring",
    "max_failures",
    "missing_trial_methods",
    "num_failures",
    "restore_from",
    "set_num_failures",
    "set_restore_failures",
    "status",
    "storage_filesystem",
    "trial_id",
    "trial_methods_wrapped",
    "trial_path",
    "wrap_trial_methods",
]

# ---------------------------------------------------------------------- identity, storage


def _storage(trial: Trial) -> StorageContext:
    storage = trial.storage
    if storage is None:  # only a trial built by hand lacks it; Tune always sets it
        raise ValueError(f"trial {trial.trial_id} has no storage (StorageContext)")
    return storage


def trial_id(trial: Trial) -> str:
    """The trial's id (``Trial.trial_id``)."""
    return str(trial.trial_id)


def status(trial: Trial) -> str:
    """Ray's status string of the trial (``PENDING``, ``RUNNING``, ``PAUSED``, ...)."""
    return str(trial.status)


def config(trial: Trial) -> Any:
    """The trial's hyperparameter config as Ray holds it."""
    return trial.config


def max_failures(trial: Trial) -> int:
    """The run's ``FailureConfig.max_failures`` as the trial carries it."""
    return int(trial.max_failures)


def experiment_name(trial: Trial) -> str:
    """The experiment's folder name (``_storage(trial).experiment_dir_name``)."""
    return str(_storage(trial).experiment_dir_name)


def experiment_path(trial: Trial) -> str:
    """The experiment's folder on its storage filesystem."""
    return str(_storage(trial).experiment_fs_path)


def trial_path(trial: Trial) -> str:
    """The trial's own folder on its storage filesystem."""
    return str(_storage(trial).trial_fs_path)


def storage_filesystem(trial: Trial) -> Any:
    """The ``pyarrow.fs.FileSystem`` the experiment is stored on (local or remote)."""
    return _storage(trial).storage_filesystem


def error_file(trial: Trial) -> str | None:
    """The trial's ``error.txt`` on the driver, once Ray has written one."""
    path = trial.error_file
    return str(path) if path else None


def is_restoring(trial: Trial) -> bool:
    """Whether Ray is restoring the trial from a checkpoint right now."""
    try:
        return bool(trial.is_restoring)
    except Exception:  # a half-built trial has no temporary state
        return False


# ---------------------------------------------------------------------- failure counters


def num_failures(trial: Trial) -> int:
    """Ray's count of the trial's failures (what ``should_recover`` compares)."""
    return int(trial.run_metadata.num_failures)


def set_num_failures(trial: Trial, count: int) -> None:
    """Put ``count`` into Ray's failure count."""
    trial.run_metadata.num_failures = count


def set_restore_failures(trial: Trial, count: int) -> None:
    """Put ``count`` into Ray's restore-failure counter (``TUNE_RESTORE_RETRY_NUM``'s)."""
    trial.temporary_state.num_restore_failures = count


# ---------------------------------------------------------------------- checkpoints


def checkpoint_path(checkpoint: Any) -> str:
    """The path of a ``ray.train.Checkpoint`` (what ``on_checkpoint`` receives)."""
    return str(checkpoint.path)


def current_checkpoint(trial: Trial) -> str | None:
    """The path Ray would restore ``trial`` from now, or ``None``."""
    latest = trial.latest_checkpoint_result
    if latest is None or latest.checkpoint is None:
        return None
    return str(latest.checkpoint.path)


def _checkpoint_manager(trial: Trial) -> _CheckpointManager:
    manager = trial.run_metadata.checkpoint_manager
    if manager is None:  # set when the trial is built; cleared by no Ray version we support
        raise ValueError(f"trial {trial.trial_id} has no checkpoint manager")
    return manager


def checkpoint_paths(trial: Trial) -> list[str]:
    """Paths of every checkpoint Ray tracks for ``trial``, oldest first, latest last."""
    manager = _checkpoint_manager(trial)
    paths: list[str] = []
    for result in list(manager.best_checkpoint_results):
        if result.checkpoint is not None and result.checkpoint.path not in paths:
            paths.append(result.checkpoint.path)
    latest = trial.latest_checkpoint_result
    if latest is not None and latest.checkpoint is not None:
        if latest.checkpoint.path in paths:
            paths.remove(latest.checkpoint.path)
        paths.append(latest.checkpoint.path)
    return paths


def forget_checkpoints(trial: Trial) -> list[str]:
    """Make Ray start ``trial`` from scratch; returns the checkpoint paths it forgot.

    Afterwards ``trial.latest_checkpoint_result`` is ``None``.
    """
    paths = checkpoint_paths(trial)
    manager = _checkpoint_manager(trial)
    manager._latest_checkpoint_result = None
    manager._checkpoint_results = []
    _checkpoints_changed(trial)
    return paths


def restore_from(trial: Trial, path: str | None, dropped: list[str]) -> None:
    """Make Ray restore ``trial`` from the checkpoint at ``path`` (``None``: from scratch).

    ``dropped`` are checkpoints Ray forgets as well (the one that failed to restore and any
    newer); a ``path`` Ray no longer tracks is registered again.
    """
    if path is None:
        forget_checkpoints(trial)
        return
    from ray.train import Checkpoint
    from ray.train._internal.session import _TrainingResult

    manager = _checkpoint_manager(trial)
    gone = set(dropped)
    kept = [
        r for r in manager._checkpoint_results
        if r.checkpoint is not None and r.checkpoint.path not in gone
    ]
    target = next((r for r in kept if r.checkpoint is not None and r.checkpoint.path == path),
                  None)
    if target is None:
        target = _TrainingResult(
            checkpoint=Checkpoint(path=path, filesystem=storage_filesystem(trial)),
            metrics={},
        )
        kept.append(target)
    manager._checkpoint_results = kept
    manager._latest_checkpoint_result = target
    _checkpoints_changed(trial)


def _checkpoints_changed(trial: Trial) -> None:
    # The checkpoint Tune was given at start (tune.run(restore=...)) would otherwise win.
    trial._restore_checkpoint_result = None
    run_metadata: Any = trial.run_metadata  # both methods are untyped in Ray
    run_metadata.invalidate_cache()
    untyped: Any = trial
    untyped.invalidate_json_state()


# ---------------------------------------------------------------------- the error seam

#: The ``Trial`` methods the seam wraps; a Ray without them cannot be supported.
SEAM_METHODS = ("handle_error", "on_restore", "set_status", "should_recover")

_WRAPPED_MARK = "__statemachine_seam__"


class TrialMethodHooks(Protocol):
    """What the wrapped ``Trial`` methods report, right after Ray's original ran."""

    def failed(self, trial: Trial, exc: BaseException | None, restoring: bool) -> None:
        """``handle_error`` ran; ``restoring``: the trial was restoring when it failed."""

    def restored(self, trial: Trial) -> None:
        """``on_restore`` ran: the restore succeeded."""

    def status_changed(self, trial: Trial, old: str | None, new: str) -> None:
        """``set_status`` changed the status from ``old`` to ``new``."""

    def recover_decision(self, trial: Trial) -> bool | None:
        """The answer ``should_recover`` returns instead of Ray's, or ``None`` for Ray's."""


def _wrap_handle_error(original: Callable[..., Any],
                       hooks: TrialMethodHooks) -> Callable[..., Any]:
    @functools.wraps(original)
    def handle_error(self: Trial, exc: BaseException | None = None, *args: Any,
                     **kw: Any) -> Any:
        restoring = is_restoring(self)  # Ray's handle_error clears it
        result = original(self, exc, *args, **kw)
        hooks.failed(self, exc, restoring)
        return result

    return handle_error


def _wrap_on_restore(original: Callable[..., Any],
                     hooks: TrialMethodHooks) -> Callable[..., Any]:
    @functools.wraps(original)
    def on_restore(self: Trial, *args: Any, **kw: Any) -> Any:
        result = original(self, *args, **kw)
        hooks.restored(self)
        return result

    return on_restore


def _wrap_set_status(original: Callable[..., Any],
                     hooks: TrialMethodHooks) -> Callable[..., Any]:
    @functools.wraps(original)
    def set_status(self: Trial, new: str, *args: Any, **kw: Any) -> Any:
        old = getattr(self, "status", None)
        result = original(self, new, *args, **kw)
        if old != new:
            hooks.status_changed(self, old, new)
        return result

    return set_status


def _wrap_should_recover(original: Callable[..., Any],
                         hooks: TrialMethodHooks) -> Callable[..., Any]:
    @functools.wraps(original)
    def should_recover(self: Trial, *args: Any, **kw: Any) -> Any:
        ray_says = original(self, *args, **kw)
        ours = hooks.recover_decision(self)
        return ray_says if ours is None else ours

    return should_recover


_WRAPPERS: dict[str, Callable[[Callable[..., Any], TrialMethodHooks], Callable[..., Any]]] = {
    "handle_error": _wrap_handle_error,
    "on_restore": _wrap_on_restore,
    "set_status": _wrap_set_status,
    "should_recover": _wrap_should_recover,
}


def wrap_trial_methods(hooks: TrialMethodHooks, trial_cls: type | None = None) -> None:
    """Wrap the :data:`SEAM_METHODS` of ``Trial`` to report to ``hooks`` (once; idempotent).

    Each wrapper runs Ray's original first and returns its result (``should_recover``:
    unless ``hooks`` answers); ``hooks`` must not raise.
    """
    cls = Trial if trial_cls is None else trial_cls
    for name, wrap in _WRAPPERS.items():
        current = cls.__dict__.get(name)
        if current is None or getattr(current, _WRAPPED_MARK, False):
            continue
        wrapped = wrap(current, hooks)
        setattr(wrapped, _WRAPPED_MARK, True)
        setattr(cls, name, wrapped)


def trial_methods_wrapped(trial_cls: type | None = None) -> bool:
    """Whether every one of the :data:`SEAM_METHODS` of ``Trial`` is wrapped."""
    cls = Trial if trial_cls is None else trial_cls
    return all(getattr(cls.__dict__.get(name), _WRAPPED_MARK, False) for name in SEAM_METHODS)


def missing_trial_methods() -> list[str]:
    """The :data:`SEAM_METHODS` the installed Ray's ``Trial`` lacks (empty when supported)."""
    return [name for name in SEAM_METHODS if not callable(getattr(Trial, name, None))]
