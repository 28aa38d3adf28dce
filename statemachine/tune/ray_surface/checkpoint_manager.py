"""Ray's bookkeeping of a trial's checkpoints: which it tracks, and which it restores from.

``trial.run_metadata.checkpoint_manager`` (``ray.train._internal.checkpoint_manager.
_CheckpointManager``, internal) and the trial's ``_restore_checkpoint_result`` are what Ray
restores a trial from; the retry policy's ``restart_from_scratch`` and ``previous_checkpoint``
rewrite them here. (Deleting the folders of discarded checkpoints is not Ray bookkeeping:
:mod:`statemachine.tune.checkpoints`.) Each access is listed, with the Ray versions it was
checked on, in :mod:`..ray_surface`.

Writing what the log knows into a restored trial (its newest checkpoint, its last result:
issue 27's resume from the log) belongs here too, beside :func:`restore_from`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from statemachine.tune.ray_surface.trials import storage_filesystem

if TYPE_CHECKING:
    from ray.train._internal.checkpoint_manager import _CheckpointManager
    from ray.tune.experiment import Trial

__all__ = ["advance_to", "checkpoint_metrics", "checkpoint_path", "checkpoint_paths",
           "forget_checkpoints", "restore_from"]


def checkpoint_path(checkpoint: Any) -> str:
    """The path of a ``ray.train.Checkpoint`` (what ``on_checkpoint`` receives)."""
    return str(checkpoint.path)


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


def checkpoint_metrics(trial: Trial) -> dict[str, Any]:
    """The metrics Ray keeps with the checkpoint it would restore ``trial`` from (``{}``)."""
    latest = trial.latest_checkpoint_result
    return dict(latest.metrics or {}) if latest is not None else {}


def advance_to(trial: Trial, newer: list[tuple[str, dict[str, Any]]]) -> None:
    """Register ``newer`` checkpoints (path, the metrics reported with it; oldest first) in
    Ray's bookkeeping of a restored trial, as ``Trial.on_checkpoint`` did for each in the
    driver that crashed: the manager keeps, scores and deletes them by the run's
    ``CheckpointConfig``, the last one is the one Ray restores, and the storage's checkpoint
    index continues after it (``checkpoint_<index>``)."""
    from ray.train import Checkpoint
    from ray.train._internal.session import _TrainingResult

    manager = _checkpoint_manager(trial)
    for path, metrics in newer:
        manager.register_checkpoint(_TrainingResult(
            checkpoint=Checkpoint(path=path, filesystem=storage_filesystem(trial)),
            metrics=dict(metrics)))
    if newer:
        index = _index(newer[-1][0])
        storage: Any = trial.storage
        if index is not None and storage is not None:
            storage.current_checkpoint_index = max(int(storage.current_checkpoint_index),
                                                   index)
    _checkpoints_changed(trial)


def _index(path: str) -> int | None:
    name = path.rstrip("/").rsplit("/", 1)[-1]
    digits = name.removeprefix("checkpoint_")
    return int(digits) if digits != name and digits.isdigit() else None
