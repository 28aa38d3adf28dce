"""What a Ray ``Trial`` says about itself, and the two failure counters Ray decides with.

Reads: its id, status, config, ``max_failures``, its storage (experiment and trial folders, the
filesystem), its ``error.txt``, whether it is restoring, the checkpoint Ray would restore it
from, whether it ever ran. Writes: ``run_metadata.num_failures`` (what ``should_recover``
compares) and ``temporary_state.num_restore_failures`` (``TUNE_RESTORE_RETRY_NUM``'s counter).
Each access is listed, with the Ray versions it was checked on, in :mod:`..ray_surface`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ray.train._internal.storage import StorageContext
    from ray.tune.experiment import Trial

__all__ = [
    "config",
    "current_checkpoint",
    "error_file",
    "experiment_name",
    "experiment_path",
    "is_restoring",
    "last_iteration",
    "max_failures",
    "never_ran",
    "num_failures",
    "set_num_failures",
    "set_restore_failures",
    "status",
    "storage_filesystem",
    "trial_id",
    "trial_path",
]

# ---------------------------------------------------------------------- identity, storage


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


def _storage(trial: Trial) -> StorageContext:
    storage = trial.storage
    if storage is None:  # only a trial built by hand lacks it; Tune always sets it
        raise ValueError(f"trial {trial.trial_id} has no storage (StorageContext)")
    return storage


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


# ---------------------------------------------------------------------- where it stands


def is_restoring(trial: Trial) -> bool:
    """Whether Ray is restoring the trial from a checkpoint right now."""
    try:
        return bool(trial.is_restoring)
    except Exception:  # a half-built trial has no temporary state
        return False


def current_checkpoint(trial: Trial) -> str | None:
    """The path Ray would restore ``trial`` from now, or ``None``."""
    latest = trial.latest_checkpoint_result
    if latest is None or latest.checkpoint is None:
        return None
    return str(latest.checkpoint.path)


def never_ran(trial: Trial) -> bool:
    """Whether Ray's trial is PENDING and never ran: no result (``run_metadata.last_result``),
    no failure and no checkpoint (a new trial, whatever its id)."""
    try:
        ran = bool(trial.run_metadata.last_result)
    except Exception:  # a half-built trial has no run metadata: it never ran
        ran = False
    return (str(trial.status) == "PENDING" and not ran and num_failures(trial) == 0
            and current_checkpoint(trial) is None)


def last_iteration(trial: Trial) -> int | None:
    """The ``training_iteration`` of the trial's last result (``run_metadata.last_result``):
    0 when it has none yet, ``None`` when Ray's result does not say."""
    try:
        last = trial.run_metadata.last_result
    except Exception:
        return None
    if not last:
        return 0
    iteration = last.get("training_iteration") if isinstance(last, dict) else None
    return iteration if type(iteration) is int and iteration >= 0 else None


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
