"""Where the event log lives: the URL given, ``STATEMACHINE_DB_URL``, or a default SQLite file.

The default is ``statemachine.db`` in the experiment's folder when the experiment is stored on
the local filesystem, so the log travels with the experiment; for remote storage (S3, GCS) it
is ``~/ray_results/<experiment>/<scheme>-<key>/statemachine.db`` on the driver, keyed by where
the experiment is stored (``<key>``: the start of the SHA-256 of its storage URI), so two
experiments of the same name stored in two places never share a local log; a copy of it
follows the experiment to its storage (:func:`log_sync_for`, :mod:`statemachine.tune.log_sync`).
A SQLite log on a network or FUSE filesystem is warned about once
(:func:`warn_if_network_filesystem`).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from statemachine.log.remote import storage_key
from statemachine.log_location import DB_URL_ENV, DEFAULT_LOG_FILENAME
from statemachine.tune.ray_surface import trials as ray_trial

if TYPE_CHECKING:
    from statemachine.tune.log_sync import LogSync

logger = logging.getLogger(__name__)
_warned_paths: set[str] = set()


def is_local_filesystem(fs: Any) -> bool:
    """Whether a pyarrow filesystem is the local one."""
    try:
        import pyarrow.fs
    except ImportError:  # pragma: no cover - pyarrow comes with ray[tune]
        return False
    return isinstance(fs, pyarrow.fs.LocalFileSystem)


def default_db_path(trial: Any) -> Path:
    """The default SQLite file for the experiment ``trial`` belongs to."""
    fs = ray_trial.storage_filesystem(trial)
    if is_local_filesystem(fs):
        return Path(ray_trial.experiment_path(trial)) / DEFAULT_LOG_FILENAME
    return _legacy_db_path(trial).parent / storage_key(fs, ray_trial.experiment_path(trial)) \
        / DEFAULT_LOG_FILENAME


def _legacy_db_path(trial: Any) -> Path:
    """Where statemachine kept the log of a remotely stored experiment before the key."""
    return Path("~/ray_results").expanduser() / ray_trial.experiment_name(trial) \
        / DEFAULT_LOG_FILENAME


def resolve_url(url: str | None, trial: Any) -> str:
    """The store URL: ``url``, else ``$STATEMACHINE_DB_URL``, else the default SQLite file."""
    if url:
        return url
    env = os.environ.get(DB_URL_ENV, "").strip()
    if env:
        return env
    path = default_db_path(trial)
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


def log_sync_for(url: str | None, trial: Any) -> LogSync | None:
    """The sync of the default log with the experiment's remote storage; ``None`` when a URL
    is given (``url`` or ``$STATEMACHINE_DB_URL``) or the experiment is stored locally."""
    if url or os.environ.get(DB_URL_ENV, "").strip():
        return None
    fs = ray_trial.storage_filesystem(trial)
    if is_local_filesystem(fs):
        return None
    from statemachine.log.credentials import redact_uri
    from statemachine.log.records import storable_name
    from statemachine.log.remote import RemoteFile
    from statemachine.tune.log_sync import LogSync

    remote = RemoteFile(fs, f"{ray_trial.experiment_path(trial)}/{DEFAULT_LOG_FILENAME}")
    # The experiment's name and storage path as the callback records them in the log.
    return LogSync(default_db_path(trial), remote,
                   experiment=storable_name(ray_trial.experiment_name(trial)),
                   storage_path=storable_name(redact_uri(ray_trial.experiment_path(trial))),
                   legacy=_legacy_db_path(trial))


def warn_if_network_filesystem(url: str) -> None:
    """Warn once per file when a SQLite log is on a network or FUSE filesystem."""
    from statemachine.log.engine import sqlite_path, to_url
    from statemachine.log.mounts import network_mount

    path = sqlite_path(to_url(url))
    if path is None or str(path) in _warned_paths:
        return
    _warned_paths.add(str(path))
    mount = network_mount(path)
    if mount is not None:
        logger.warning(
            "statemachine: the event log %s is on a %s filesystem (%s at %s): SQLite's locking "
            "is not reliable there, and two drivers or a stale lock can corrupt the log. Use "
            "PostgreSQL (EventLogCallback(url='postgresql+psycopg://...') or "
            "STATEMACHINE_DB_URL), or a log on a local disk (url='/local/disk/statemachine.db')",
            path, mount.fstype, mount.source, mount.mount_point,
        )
