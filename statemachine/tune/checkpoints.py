"""Delete the checkpoint folders a ``restart_from_scratch`` discarded, and nothing else.

Deletion goes through the trial's storage filesystem (local or remote) and refuses any path
that is not inside the trial's own directory: ``..`` components, paths elsewhere, local
symlinks leading out, and paths no filesystem can hold (a NUL character) are refused with a
reason, never followed; a refusal never skips the other paths. (Making Ray forget those
checkpoints, or fall back to an older one, is Ray bookkeeping:
:func:`statemachine.tune.ray_surface.checkpoint_manager.forget_checkpoints` and
:func:`~statemachine.tune.ray_surface.checkpoint_manager.restore_from`.)
"""

from __future__ import annotations

import logging
import os
import posixpath
from dataclasses import dataclass, field
from typing import Any

from statemachine.tune.ray_surface import trials as ray_trial
from statemachine.tune.store_url import is_local_filesystem

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


def refusal(path: str, trial_dir: str, local: bool) -> str | None:
    """Why ``path`` must not be deleted as a checkpoint of the trial in ``trial_dir``."""
    if not path:
        return "empty path"
    if "\x00" in path or "\x00" in trial_dir:
        return "the path contains a NUL character (no filesystem has such a file)"
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
    fs = ray_trial.storage_filesystem(trial)
    trial_dir = ray_trial.trial_path(trial)
    local = is_local_filesystem(fs)
    for path in paths:
        try:
            reason = refusal(path, trial_dir, local)
        except (ValueError, OSError) as exc:  # a path the OS cannot even look at
            reason = f"the path cannot be checked ({type(exc).__name__}: {exc})"
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
