"""What a Ray ``Trial`` says about itself, and the two failure counters Ray decides with.

Reads: its id, status, config, ``max_failures``, its storage (experiment and trial folders, the
filesystem), its ``error.txt``, whether it is restoring, the checkpoint Ray would restore it
from, whether it ever ran. Writes: ``run_metadata.num_failures`` (what ``should_recover``
compares) and ``temporary_state.num_restore_failures`` (``TUNE_RESTORE_RETRY_NUM``'s counter).
Each access is listed, with the Ray versions it was checked on, in :mod:`..ray_surface`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ray.train._internal.storage import StorageContext
    from ray.tune.experiment import Trial

__all__ = [
    "config",
    "current_checkpoint",
    "error_file",
    "experiment_folder_names",
    "experiment_name",
    "experiment_path",
    "folder_files",
    "is_restoring",
    "last_iteration",
    "last_result",
    "local_error_files",
    "max_failures",
    "never_ran",
    "num_failures",
    "point_to_folder",
    "read_experiment_file",
    "read_trial_file",
    "set_error_files",
    "set_last_result",
    "set_num_failures",
    "set_restore_failures",
    "set_restored_status",
    "status",
    "storage_filesystem",
    "trial_folder_names",
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


def local_error_files(trial: Trial) -> dict[str, bytes]:
    """The ``error.txt`` and ``error.pkl`` Ray's ``handle_error`` wrote for the trial in the
    driver's staging folder (``trial.error_file``, ``trial.pickled_error_file``), by name
    (``{}``: none, or unreadable)."""
    found: dict[str, bytes] = {}
    for name in ("error_file", "pickled_error_file"):
        try:
            path = getattr(trial, name)
            if path:
                with open(str(path), "rb") as f:
                    found[str(path).rsplit("/", 1)[-1]] = f.read()
        except Exception:  # gone, unreadable, or a half-built trial: nothing to tell
            continue
    return found


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


def last_result(trial: Trial) -> dict[str, Any]:
    """A copy of the trial's last result (``{}``: none)."""
    try:
        return dict(trial.run_metadata.last_result or {})
    except Exception:  # a half-built trial has no run metadata
        return {}


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
    0 when it has none yet, ``None`` when Ray's result does not say. When Tune reports a
    checkpoint it is the iteration the checkpoint was saved at (Tune saves after it processed
    that result, and trains on only after it processed the save)."""
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


# ---------------------------------------------------------------------- a restored trial

# Written only between Ray's restore of the experiment state and its requeue of the trials
# (``ray_surface.requeue``), before the controller tracks the trial's status: issue 27.


def set_restored_status(trial: Trial, status: str) -> None:
    """Put ``status`` (``TERMINATED``, ``ERROR``) into a trial Ray has just restored."""
    trial.status = status
    untyped: Any = trial
    untyped.invalidate_json_state()


def set_last_result(trial: Trial, result: dict[str, Any]) -> None:
    """Make ``result`` the trial's last result (``run_metadata.last_result``)."""
    import time

    metadata: Any = trial.run_metadata
    metadata.last_result = result
    metadata.last_result_time = time.time()
    metadata.invalidate_cache()


def set_error_files(trial: Trial, error_file: str | None, pickled_error_file: str | None) -> None:
    """Name the trial's ``error.txt``/``error.pkl`` (relative to its folder) for Ray's
    ``ResultGrid``, as Ray does when the trial errors."""
    metadata: Any = trial.run_metadata
    metadata.error_filename = error_file
    metadata.pickled_error_filename = pickled_error_file
    metadata.invalidate_cache()


def point_to_folder(trial: Trial, name: str | None) -> None:
    """Make ``name`` (under the experiment's folder; ``None``: none yet) the folder of a trial
    Ray has not started, as ``Trial.init_local_path`` does with the name it generates
    (``relative_logdir`` and ``storage.trial_dir_name``); Ray then generates none."""
    untyped: Any = trial
    untyped.relative_logdir = name
    _storage(trial).trial_dir_name = name
    untyped.invalidate_json_state()


def _listing(trial: Trial, path: str) -> list[Any]:
    """The entries of ``path`` on the trial's storage (``[]``: none, or unreadable)."""
    import pyarrow.fs

    try:
        return list(storage_filesystem(trial).get_file_info(
            pyarrow.fs.FileSelector(path, allow_not_found=True)))
    except Exception:  # a storage that cannot be listed has nothing to tell
        return []


def experiment_folder_names(trial: Trial) -> list[str]:
    """The names of the folders in the experiment's folder on storage (``[]``: unreadable)."""
    import pyarrow.fs

    return sorted(info.base_name for info in _listing(trial, experiment_path(trial))
                  if info.type == pyarrow.fs.FileType.Directory)


def has_folder_name(trial: Trial) -> bool:
    """Whether Ray named the trial's folder yet (``storage.trial_dir_name``): a trial it has
    not started has none, and its ``trial_fs_path`` raises."""
    return _storage(trial).trial_dir_name is not None


def trial_folder_names(trial: Trial) -> list[str]:
    """The names in the trial's folder on its storage (``[]``: no folder yet, none, or
    unreadable)."""
    if not has_folder_name(trial):
        return []
    return sorted(info.base_name for info in _listing(trial, trial_path(trial)))


def read_trial_file(trial: Trial, name: str) -> bytes | None:
    """The bytes of ``name`` in the trial's folder on storage, ``None`` if it cannot be read."""
    return _read_file(trial, lambda: f"{trial_path(trial)}/{name}")


def read_experiment_file(trial: Trial, relative: str) -> bytes | None:
    """The bytes of ``relative`` (a path under the experiment's folder) on storage, ``None``
    if it cannot be read."""
    return _read_file(trial, lambda: f"{experiment_path(trial)}/{relative}")


def _read_file(trial: Trial, path: Callable[[], str]) -> bytes | None:
    try:  # the path too: Ray raises for a trial it has not named a folder for yet
        with storage_filesystem(trial).open_input_stream(path()) as f:
            return bytes(f.readall())
    except Exception:  # missing or unreadable: nothing to tell
        return None


def write_trial_file(trial: Trial, name: str, data: bytes) -> bool:
    """Write ``name`` into the trial's folder on storage; whether it was written."""
    try:
        fs = storage_filesystem(trial)
        fs.create_dir(trial_path(trial), recursive=True)
        with fs.open_output_stream(f"{trial_path(trial)}/{name}") as f:
            f.write(data)
    except Exception:  # a storage that cannot be written: the resume falls back, says so
        return False
    return True


def folder_files(trial: Trial, path: str) -> int | None:
    """How many files the folder ``path`` holds on the trial's storage (recursively);
    ``None`` when it is not a folder (missing, a file, unreadable)."""
    import pyarrow.fs

    fs = storage_filesystem(trial)
    try:
        if fs.get_file_info(path).type != pyarrow.fs.FileType.Directory:
            return None
        infos = fs.get_file_info(pyarrow.fs.FileSelector(path, recursive=True))
    except Exception:  # unreadable: not a checkpoint Ray could restore
        return None
    return sum(1 for info in infos if info.type == pyarrow.fs.FileType.File)
