"""The files of a Ray experiment folder, on a local disk or on storage (``s3://...``).

Reads only. A local folder is read with the standard library (an ingest needs neither Ray
nor pyarrow on a laptop); a storage URI through pyarrow's filesystem, as the rest of the
project reads storage (:mod:`statemachine.log.remote`): pyarrow comes with ``ray[tune]``.

:meth:`ExperimentFolder.tree` lists the folder and its direct subfolders (the trial folders):
on storage one recursive listing (a flat listing is what object stores do cheaply), on a
local disk one ``scandir`` per folder (a trial's checkpoint folders are not walked).
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statemachine.distribution import install_hint
from statemachine.exceptions import IngestError, NotARayExperimentError
from statemachine.log.credentials import redact_uri
from statemachine.log.remote import is_storage_uri

__all__ = ["Entry", "ExperimentFolder", "LocalFolder", "StorageFolder", "open_folder"]


@dataclass(frozen=True)
class Entry:
    """A file or folder: its name, kind and modification time (seconds since the epoch;
    ``None`` when the filesystem does not say). A folder on storage has the newest time of
    the files under it."""

    name: str
    is_dir: bool
    mtime: float | None = None


class ExperimentFolder(ABC):
    """One experiment folder: its listing and its files, by path relative to it."""

    #: The folder as messages name it (scheme and path, never credentials).
    label: str
    #: The folder's own name (an experiment's default name).
    name: str

    @abstractmethod
    def tree(self) -> dict[str, list[Entry]]:
        """``{"": top-level entries, "<subfolder>": its entries, ...}`` (two levels)."""

    @abstractmethod
    def read(self, relative: str) -> bytes | None:
        """A file's content (``None``: there is no such file)."""

    @abstractmethod
    def path(self, relative: str) -> str:
        """The path of an entry as Ray names it (a checkpoint's ``Checkpoint.path``)."""

    @property
    def local(self) -> Path | None:
        """The folder on the local disk (``None``: on storage)."""
        return None


class LocalFolder(ExperimentFolder):
    """An experiment folder on the local filesystem."""

    def __init__(self, root: Path) -> None:
        self.root = root.expanduser().absolute()
        self.label = str(self.root)
        self.name = self.root.name

    @property
    def local(self) -> Path:
        """The folder itself."""
        return self.root

    def tree(self) -> dict[str, list[Entry]]:
        """The folder's entries and each subfolder's."""
        top = list(_scan(self.root))
        found = {"": top}
        for entry in top:
            if entry.is_dir:
                found[entry.name] = list(_scan(self.root / entry.name))
        return found

    def read(self, relative: str) -> bytes | None:
        """A file's bytes, ``None`` when it is missing."""
        try:
            return (self.root / relative).read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        except OSError as exc:
            raise IngestError(f"cannot read {self.root / relative}: {exc.strerror or exc}") \
                from None

    def path(self, relative: str) -> str:
        """The absolute path."""
        return str(self.root / relative)


def _scan(folder: Path) -> Iterator[Entry]:
    try:
        with os.scandir(folder) as found:
            for item in found:
                try:
                    is_dir = item.is_dir()
                    mtime: float | None = item.stat().st_mtime
                except OSError:  # removed while listed
                    continue
                yield Entry(item.name, is_dir, mtime)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise IngestError(f"cannot list {folder}: {exc.strerror or exc}") from None


class StorageFolder(ExperimentFolder):
    """An experiment folder on a pyarrow filesystem (S3, GCS, ...)."""

    def __init__(self, uri: str) -> None:
        try:
            import pyarrow.fs
        except ImportError:
            raise IngestError(
                f"reading {redact_uri(uri)} needs pyarrow: {install_hint('ray')}"
            ) from None
        try:
            fs, path = pyarrow.fs.FileSystem.from_uri(uri)
        except Exception as exc:
            raise IngestError(f"cannot use storage URI {redact_uri(uri)}: "
                              f"{_first_line(exc)}") from None
        self.fs: Any = fs
        self.base = path.rstrip("/")
        scheme = uri.split("://", 1)[0]
        self.label = f"{scheme}://{self.base}"
        self.name = self.base.rsplit("/", 1)[-1]

    def tree(self) -> dict[str, list[Entry]]:
        """One recursive listing, folded into two levels."""
        import pyarrow.fs

        try:
            infos = self.fs.get_file_info(
                pyarrow.fs.FileSelector(self.base, recursive=True, allow_not_found=True))
        except Exception as exc:
            raise IngestError(f"cannot list {self.label}: {_first_line(exc)}") from None
        levels: dict[str, dict[str, Entry]] = {"": {}}
        prefix = self.base + "/"
        for info in infos:
            if not info.path.startswith(prefix):
                continue
            parts = info.path[len(prefix):].split("/")
            mtime = info.mtime.timestamp() if info.mtime is not None else None
            is_file = info.type == pyarrow.fs.FileType.File
            for depth in range(min(len(parts), 2)):
                parent = "/".join(parts[:depth])
                is_dir = depth < len(parts) - 1 or not is_file
                _add(levels.setdefault(parent, {}), parts[depth], is_dir, mtime)
                if depth == 0 and is_dir:
                    levels.setdefault(parts[0], {})
        return {folder: list(entries.values()) for folder, entries in levels.items()}

    def read(self, relative: str) -> bytes | None:
        """A file's bytes, ``None`` when it is missing."""
        import pyarrow.fs

        path = f"{self.base}/{relative}"
        try:
            if self.fs.get_file_info(path).type != pyarrow.fs.FileType.File:
                return None
            with self.fs.open_input_stream(path) as stream:
                return bytes(stream.read())
        except Exception as exc:
            raise IngestError(f"cannot read {self.label}/{relative}: {_first_line(exc)}") \
                from None

    def path(self, relative: str) -> str:
        """The path on the filesystem (no scheme), as Ray's ``Checkpoint.path``."""
        return f"{self.base}/{relative}"


def _add(entries: dict[str, Entry], name: str, is_dir: bool, mtime: float | None) -> None:
    old = entries.get(name)
    if old is not None and old.mtime is not None and (mtime is None or old.mtime >= mtime):
        mtime = old.mtime
    entries[name] = Entry(name, is_dir or (old is not None and old.is_dir), mtime)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return redact_uri(text.splitlines()[0]) if text else type(exc).__name__


def open_folder(location: str) -> ExperimentFolder:
    """The experiment folder at a local path or a storage URI.

    A local path that is not a folder raises :class:`NotARayExperimentError` (nothing is
    created); a storage URI is checked when its listing is read.
    """
    if is_storage_uri(location):
        return StorageFolder(location)
    if "://" in location:
        raise NotARayExperimentError(
            f"{redact_uri(location)} is not a folder or a storage URI (s3://, gs://, ...): "
            "give the experiment folder Ray Tune wrote, e.g. ~/ray_results/my_exp"
        )
    root = Path(location).expanduser()
    if not root.is_dir():
        what = "is a file, not a folder" if root.exists() else "does not exist"
        raise NotARayExperimentError(
            f"{root} {what}: give the experiment folder Ray Tune wrote, e.g. "
            "~/ray_results/my_exp"
        )
    return LocalFolder(root)
