"""A log file on an experiment's storage (S3, GCS, any pyarrow filesystem): up and down whole.

Uploads go to a temporary name beside the target and are then moved over it, so a reader sees
the previous copy or the new one, never half a file (on S3 the move is a server-side copy,
which replaces the object at once). Beside the copy goes its manifest (checksum, size, the
log's identity: :mod:`statemachine.log.copy_check`), written before the move when a manifest
is already there (it then vouches for the new copy and the ones before; a move that fails
puts the old manifest back) and after it otherwise.
Downloads go to a file the caller names. A folder where the file should be (a key
``statemachine.db/child`` on S3) is refused, never taken for a missing copy. pyarrow comes
with ``ray[tune]``; nothing here needs a cloud SDK of its own.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from statemachine.distribution import install_hint
from statemachine.exceptions import LogCopyRefusedError, LogSyncError
from statemachine.log.copy_check import MANIFEST_SUFFIX, CopyManifest, check_copy
from statemachine.log.credentials import redact_uri
from statemachine.log_location import DEFAULT_LOG_FILENAME

#: URI schemes that name a storage filesystem rather than a database.
STORAGE_SCHEMES = frozenset({"s3", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss", "az"})
_CHUNK = 1 << 20
#: At most this many checksums in a manifest written ahead of a move: its copy's and those
#: of the copies that uploads killed before their moves left in place (one per such kill in a
#: row; a finished upload vouches for its copy alone again).
_VOUCHED = 256


def is_storage_uri(text: str) -> bool:
    """Whether ``text`` is a storage URI (``s3://...``) rather than a database URL or a path."""
    scheme, sep, _ = text.partition("://")
    return bool(sep) and scheme.lower() in STORAGE_SCHEMES


def storage_label(fs: Any, path: str) -> str:
    """``path`` on ``fs`` as a URI for messages and keys (``s3://bucket/path``): pyarrow's
    paths never hold credentials or a query; anything that looks like one is hidden."""
    kind = str(getattr(fs, "type_name", "") or "")
    if kind == "local" or not kind:
        return path
    return redact_uri(f"{kind.rsplit('+', 1)[-1]}://{path}")


def storage_key(fs: Any, path: str) -> str:
    """The folder name of the local log of an experiment stored at ``path`` on ``fs``:
    the scheme and the first 12 hex characters of the SHA-256 of its storage URI (the
    callback keeps that log in ``~/ray_results/<key>/``; ``trial-replay ingest`` writes
    there for an experiment on storage)."""
    uri = storage_label(fs, path.rstrip("/"))
    scheme = uri.partition("://")[0] if "://" in uri else "storage"
    safe = "".join(c for c in scheme if c.isalnum()) or "storage"
    return f"{safe}-{hashlib.sha256(uri.encode('utf-8', 'surrogatepass')).hexdigest()[:12]}"


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
        self.label = storage_label(fs, self.path)
        """The file for messages (scheme and path; never credentials)."""

    @property
    def manifest_path(self) -> str:
        """Where the copy's manifest goes (beside it)."""
        return self.path + MANIFEST_SUFFIX

    def exists(self) -> bool:
        """Whether the file is there; a folder at its path is refused
        (:class:`LogCopyRefusedError`), never taken for a missing file."""
        import pyarrow.fs

        try:
            info = self.fs.get_file_info(self.path)
        except Exception as exc:
            raise LogSyncError(f"cannot look up {self.label}: {_oneline(exc)}") from exc
        if info.type == pyarrow.fs.FileType.Directory:
            raise LogCopyRefusedError(
                f"{self.label} is a folder (there are keys under {self.label}/), not the event "
                "log's copy; it was not taken for a missing copy and nothing was uploaded: "
                "move what is under it away"
            )
        return bool(info.type == pyarrow.fs.FileType.File)

    def read_manifest(self) -> CopyManifest | None:
        """The manifest beside the copy (``None``: there is none)."""
        import pyarrow.fs

        label = self.label + MANIFEST_SUFFIX
        try:
            info = self.fs.get_file_info(self.manifest_path)
            if info.type != pyarrow.fs.FileType.File:
                return None
            with self.fs.open_input_stream(self.manifest_path) as source:
                text = source.read(1 << 20).decode("utf-8", errors="replace")
        except Exception as exc:
            raise LogSyncError(f"cannot read {label}: {_oneline(exc)}") from exc
        return CopyManifest.from_json(text, label)

    def upload(self, local: Path, manifest: CopyManifest | None = None,
               previous: CopyManifest | None = None) -> None:
        """Replace the file by the local file ``local`` (temporary name, then moved over it),
        with ``manifest`` beside it; ``previous``: the manifest there now (it was read)."""
        folder, _, name = self.path.rpartition("/")
        temporary = f"{folder}/.{name}.uploading-{uuid.uuid4().hex[:12]}"
        ahead = False  # a manifest naming the new copy is there, the copy not yet
        try:
            if folder:
                self.fs.create_dir(folder, recursive=True)
            with local.open("rb") as source, self.fs.open_output_stream(temporary) as out:
                shutil.copyfileobj(source, out, _CHUNK)
            if manifest is not None and previous is not None:
                # Before the move: a kill in between leaves the old copy, still vouched for
                # (the previous manifest's own copy, or one it vouched for after such a kill).
                vouched = dict.fromkeys((manifest.sha256, *previous.accepts))
                self._write_manifest(replace(manifest, accepts=tuple(vouched)[:_VOUCHED]))
                ahead = True
            self.fs.move(temporary, self.path)
            ahead = False
            if manifest is not None:
                # After it: the manifest vouches for the new copy alone (a kill in between
                # leaves the one written ahead, which names it too; the first time, a copy
                # without a manifest, checked by its header alone as one uploaded before
                # manifests). Were the checksums written ahead kept instead, a few kills in
                # a row before the move could push out the one of the copy still in place.
                self._write_manifest(replace(manifest, accepts=(manifest.sha256,)))
        except Exception as exc:
            with contextlib.suppress(Exception):
                self.fs.delete_file(temporary)
            if ahead and previous is not None:  # the move failed: the old manifest again
                with contextlib.suppress(Exception):
                    self._write_manifest(previous)
            raise LogSyncError(f"uploading to {self.label} failed: {_oneline(exc)}") from exc

    def _write_manifest(self, manifest: CopyManifest) -> None:
        folder, _, name = self.manifest_path.rpartition("/")
        temporary = f"{folder}/.{name}.uploading-{uuid.uuid4().hex[:12]}"
        try:
            with self.fs.open_output_stream(temporary) as out:
                out.write(manifest.to_json().encode("utf-8"))
            self.fs.move(temporary, self.manifest_path)
        except BaseException:
            with contextlib.suppress(Exception):
                self.fs.delete_file(temporary)
            raise

    def remove_leftovers(self) -> int:
        """Delete temporary uploads a killed uploader left beside the file; returns how many.

        Only for the one driver of an experiment, before it uploads anything.
        """
        import pyarrow.fs

        folder, _, name = self.path.rpartition("/")
        prefixes = (f".{name}.uploading-", f".{name}{MANIFEST_SUFFIX}.uploading-")
        try:
            found = self.fs.get_file_info(pyarrow.fs.FileSelector(folder, allow_not_found=True))
            stale = [i.path for i in found if i.base_name.startswith(prefixes)]
            for path in stale:
                self.fs.delete_file(path)
        except Exception as exc:
            raise LogSyncError(f"cannot list or clean {folder}: {_oneline(exc)}") from exc
        return len(stale)

    def download(self, local: Path) -> bool:
        """Write the file's content to ``local`` (replaced); False when there is no such file.

        It is not checked: see :meth:`download_checked`.
        """
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


    def download_checked(self, local: Path) -> bool:
        """:meth:`download`, then refuse a copy that is not whole (its size against its
        SQLite header, its checksum against the manifest): :class:`LogCopyRefusedError`,
        and ``local`` is removed."""
        if not self.download(local):
            return False
        try:
            # After the copy: an upload in between wrote a manifest that still names it.
            check_copy(local, self.label, self.read_manifest())
        except BaseException:
            local.unlink(missing_ok=True)
            raise
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
        if not remote.download_checked(local):
            raise LogSyncError(
                f"no event log at {remote.label} (check the experiment's storage URI)"
            )
        yield local
