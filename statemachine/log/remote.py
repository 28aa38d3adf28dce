"""A log file on an experiment's storage (S3, GCS, any pyarrow filesystem): up and down whole.

Uploads go to a temporary name beside the target and are then moved over it, so a reader sees
the previous copy or the new one, never half a file (on S3 the move is a server-side copy,
which replaces the object at once). Downloads go to a file the caller names. pyarrow comes with
``ray[tune]``; nothing here needs a cloud SDK of its own.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from statemachine.distribution import install_hint
from statemachine.exceptions import LogSyncError
from statemachine.log.credentials import redact_uri
from statemachine.log_location import DEFAULT_LOG_FILENAME

#: URI schemes that name a storage filesystem rather than a database.
STORAGE_SCHEMES = frozenset({"s3", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss", "az"})
_CHUNK = 1 << 20


def is_storage_uri(text: str) -> bool:
    """Whether ``text`` is a storage URI (``s3://...``) rather than a database URL or a path."""
    scheme, sep, _ = text.partition("://")
    return bool(sep) and scheme.lower() in STORAGE_SCHEMES


def _label(fs: Any, path: str) -> str:
    kind = str(getattr(fs, "type_name", "") or "")
    if kind == "local" or not kind:
        return path
    return f"{kind.rsplit('+', 1)[-1]}://{path}"


class RemoteFile:
    """One file on a pyarrow filesystem.

    Args:
        fs: the ``pyarrow.fs.FileSystem`` (for a Tune experiment,
            ``trial.storage.storage_filesystem``).
        path: the file's path on ``fs`` (no scheme).
    """

    def __init__(self, fs: Any, path: str) -> None:
        self.fs = fs
        self.path = path.rstrip("/")
        self.label = _label(fs, self.path)
        """The file for messages (scheme and path; never credentials)."""

    def exists(self) -> bool:
        """Whether the file is there."""
        import pyarrow.fs

        try:
            info = self.fs.get_file_info(self.path)
        except Exception as exc:
            raise LogSyncError(f"cannot look up {self.label}: {_oneline(exc)}") from exc
        return bool(info.type == pyarrow.fs.FileType.File)

    def upload(self, local: Path) -> None:
        """Replace the file by the local file ``local`` (temporary name, then moved over it)."""
        folder, _, name = self.path.rpartition("/")
        temporary = f"{folder}/.{name}.uploading-{uuid.uuid4().hex[:12]}"
        try:
            if folder:
                self.fs.create_dir(folder, recursive=True)
            with local.open("rb") as source, self.fs.open_output_stream(temporary) as out:
                shutil.copyfileobj(source, out, _CHUNK)
            self.fs.move(temporary, self.path)
        except Exception as exc:
            with contextlib.suppress(Exception):
                self.fs.delete_file(temporary)
            raise LogSyncError(f"uploading to {self.label} failed: {_oneline(exc)}") from exc

    def remove_leftovers(self) -> int:
        """Delete temporary uploads a killed uploader left beside the file; returns how many.

        Only for the one driver of an experiment, before it uploads anything.
        """
        import pyarrow.fs

        folder, _, name = self.path.rpartition("/")
        prefix = f".{name}.uploading-"
        try:
            found = self.fs.get_file_info(pyarrow.fs.FileSelector(folder, allow_not_found=True))
            stale = [i.path for i in found if i.base_name.startswith(prefix)]
            for path in stale:
                self.fs.delete_file(path)
        except Exception as exc:
            raise LogSyncError(f"cannot list or clean {folder}: {_oneline(exc)}") from exc
        return len(stale)

    def download(self, local: Path) -> bool:
        """Write the file's content to ``local`` (replaced); False when there is no such file."""
        if not self.exists():
            return False
        try:
            with self.fs.open_input_stream(self.path) as source, local.open("wb") as out:
                while chunk := source.read(_CHUNK):
                    out.write(chunk)
        except Exception as exc:
            local.unlink(missing_ok=True)
            raise LogSyncError(f"downloading {self.label} failed: {_oneline(exc)}") from exc
        return True


def _oneline(exc: BaseException) -> str:
    text = str(exc).strip()
    return redact_uri(text.splitlines()[0]) if text else type(exc).__name__


def remote_file(uri: str) -> RemoteFile:
    """The event log a storage URI names: the URI itself when it ends in ``.db``, else
    ``statemachine.db`` in the experiment folder it names."""
    try:
        import pyarrow.fs
    except ImportError as exc:  # pragma: no cover - pyarrow comes with ray[tune]
        raise LogSyncError(
            f"reading {redact_uri(uri)} needs pyarrow: {install_hint('ray')}"
        ) from exc
    try:
        fs, path = pyarrow.fs.FileSystem.from_uri(uri)
    except Exception as exc:
        raise LogSyncError(f"cannot use storage URI {redact_uri(uri)}: {_oneline(exc)}") from exc
    if not path.endswith(".db"):
        path = f"{path.rstrip('/')}/{DEFAULT_LOG_FILENAME}"
    return RemoteFile(fs, path)


@contextlib.contextmanager
def downloaded(uri: str) -> Iterator[Path]:
    """The event log at a storage URI, downloaded to a temporary file deleted on exit."""
    remote = remote_file(uri)
    with tempfile.TemporaryDirectory(prefix="statemachine-") as folder:
        local = Path(folder, DEFAULT_LOG_FILENAME)
        if not remote.download(local):
            raise LogSyncError(
                f"no event log at {remote.label} (check the experiment's storage URI)"
            )
        yield local
