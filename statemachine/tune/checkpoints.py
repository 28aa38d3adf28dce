"""Steer which checkpoint Ray restores a trial from, and delete discarded checkpoint folders.

``restart_from_scratch`` clears the trial's checkpoints in Ray's own bookkeeping, so the next
start trains from scratch (``trial.latest_checkpoint_result`` is ``None``);
``previous_checkpoint`` points Ray at an older checkpoint. Deletion goes through the trial's
storage filesystem (``trial.storage.storage_filesystem``, local or remote) and refuses any
path that is not inside the trial's own directory: ``..`` components, paths elsewhere, and
local symlinks leading out are refused with a reason, never followed.
"""

from __future__ import annotations

import logging
import os
import posixpath
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)


@dataclass
class DeletionReport:
    """What :func:`delete_checkpoint_dirs` did with each path."""

    deleted: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    @property
    def all_gone(self) -> bool:
        """Every path was deleted or was already gone."""
        return not self.refused and not self.failed


def checkpoint_paths(trial: Any) -> list[str]:
    """Paths of every checkpoint Ray tracks for ``trial``, oldest first, latest last."""
    manager = trial.run_metadata.checkpoint_manager
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


def current_checkpoint_path(trial: Any) -> str | None:
    """The path Ray would restore ``trial`` from now, or ``None``."""
    latest = trial.latest_checkpoint_result
    if latest is None or latest.checkpoint is None:
        return None
    return str(latest.checkpoint.path)


def forget_all(trial: Any) -> list[str]:
    """Make Ray start ``trial`` from scratch; returns the checkpoint paths it forgot."""
    paths = checkpoint_paths(trial)
    manager = trial.run_metadata.checkpoint_manager
    manager._latest_checkpoint_result = None
    manager._checkpoint_results = []
    trial._restore_checkpoint_result = None
    trial.run_metadata.invalidate_cache()
    trial.invalidate_json_state()
    return paths


def fall_back_to(trial: Any, path: str | None, dropped: list[str]) -> None:
    """Make Ray restore ``trial`` from the checkpoint at ``path`` (``None``: from scratch).

    ``dropped`` are the checkpoints the fold gave up (the one that failed to restore and any
    newer); Ray forgets them too.
    """
    if path is None:
        forget_all(trial)
        return
    from ray.train import Checkpoint
    from ray.train._internal.session import _TrainingResult

    manager = trial.run_metadata.checkpoint_manager
    gone = set(dropped)
    kept = [
        r for r in manager._checkpoint_results
        if r.checkpoint is not None and r.checkpoint.path not in gone
    ]
    target = next((r for r in kept if r.checkpoint.path == path), None)
    if target is None:
        target = _TrainingResult(
            checkpoint=Checkpoint(path=path, filesystem=trial.storage.storage_filesystem),
            metrics={},
        )
        kept.append(target)
    manager._checkpoint_results = kept
    manager._latest_checkpoint_result = target
    trial._restore_checkpoint_result = None
    trial.run_metadata.invalidate_cache()
    trial.invalidate_json_state()


def _is_local(fs: Any) -> bool:
    try:
        import pyarrow.fs

        return isinstance(fs, pyarrow.fs.LocalFileSystem)
    except ImportError:  # pragma: no cover - pyarrow comes with ray[tune]
        return False


def refusal(path: str, trial_dir: str, local: bool) -> str | None:
    """Why ``path`` must not be deleted as a checkpoint of the trial in ``trial_dir``."""
    if not path:
        return "empty path"
    if ".." in path.replace("\\", "/").split("/"):
        return "the path contains '..'"
    norm_dir = posixpath.normpath(trial_dir)
    norm = posixpath.normpath(path)
    if norm == norm_dir or not norm.startswith(norm_dir.rstrip("/") + "/"):
        return f"the path is not inside the trial directory {trial_dir}"
    if local:
        real_dir = os.path.realpath(trial_dir)
        real = os.path.realpath(path)
        if os.path.islink(path) or not real.startswith(real_dir.rstrip(os.sep) + os.sep):
            return f"the path is (or goes through) a symlink leading to {real}"
    return None


def delete_checkpoint_dirs(trial: Any, paths: list[str]) -> DeletionReport:
    """Delete the checkpoint folders ``paths`` of ``trial`` through its storage filesystem."""
    report = DeletionReport()
    storage = trial.storage
    fs = storage.storage_filesystem
    trial_dir = storage.trial_fs_path
    local = _is_local(fs)
    for path in paths:
        reason = refusal(path, trial_dir, local)
        if reason is not None:
            report.refused[path] = reason
            logger.warning("statemachine: not deleting checkpoint %s: %s", path, reason)
            continue
        try:
            import pyarrow.fs

            info = fs.get_file_info(path)
            if info.type == pyarrow.fs.FileType.NotFound:
                report.missing.append(path)
                continue
            fs.delete_dir(path)
            report.deleted.append(path)
        except Exception as exc:  # a failed delete is reported, not raised
            report.failed[path] = f"{type(exc).__name__}: {exc}"
            logger.error("statemachine: could not delete checkpoint %s: %s", path, exc)
    return report
