"""Where the event log lives: the URL given, ``STATEMACHINE_DB_URL``, or a default SQLite file.

The default is ``statemachine.db`` in the experiment's folder when the experiment is stored on
the local filesystem, so the log travels with the experiment; for remote storage (S3, GCS) it
is ``~/ray_results/<experiment>/statemachine.db`` on the driver (set ``STATEMACHINE_DB_URL``,
e.g. a PostgreSQL URL, for a log that outlives the driver's machine).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from statemachine.tune import ray_surface

URL_ENV = "STATEMACHINE_DB_URL"
DEFAULT_FILENAME = "statemachine.db"


def is_local_filesystem(fs: Any) -> bool:
    """Whether a pyarrow filesystem is the local one."""
    try:
        import pyarrow.fs
    except ImportError:  # pragma: no cover - pyarrow comes with ray[tune]
        return False
    return isinstance(fs, pyarrow.fs.LocalFileSystem)


def default_db_path(trial: Any) -> Path:
    """The default SQLite file for the experiment ``trial`` belongs to."""
    if is_local_filesystem(ray_surface.storage_filesystem(trial)):
        folder = Path(ray_surface.experiment_path(trial))
    else:
        folder = Path("~/ray_results").expanduser() / ray_surface.experiment_name(trial)
    return folder / DEFAULT_FILENAME


def resolve_url(url: str | None, trial: Any) -> str:
    """The store URL: ``url``, else ``$STATEMACHINE_DB_URL``, else the default SQLite file."""
    if url:
        return url
    env = os.environ.get(URL_ENV, "").strip()
    if env:
        return env
    path = default_db_path(trial)
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"
