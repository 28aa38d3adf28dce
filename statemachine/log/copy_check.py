"""Is a copy of a SQLite event log whole? Its size against its header, its checksum against
the manifest written beside it when it was uploaded.

A copy missing its last bytes can still open, pass ``PRAGMA integrity_check`` (the short last
page reads as zeros) and look as far along as the log it came from; only later does a read
find a NUL where a time should be. Two checks catch it before the copy is adopted:

- **the SQLite header**: it records the page size and (when its "valid-for" counter equals
  the change counter, as SQLite writes it on every commit) the number of pages, so the file
  must be exactly ``pages x page size`` bytes;
- **the manifest** (``statemachine.db.manifest.json`` beside the copy): the SHA-256 of the
  whole copy and the log's identity, written by the uploader. It also vouches for the copy
  it replaces (and the one before), because it is written before the copy is moved into
  place: an uploader killed between the two leaves the previous copy, which the manifest
  still names. Every copy it names is a whole one. A copy without a manifest (uploaded by
  an older statemachine) is checked by its header alone.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from statemachine.exceptions import LogCopyRefusedError

#: The first 16 bytes of every SQLite database file.
SQLITE_MAGIC = b"SQLite format 3\x00"
_HEADER_BYTES = 100
#: The manifest's name beside the copy: ``<copy's name>`` + this.
MANIFEST_SUFFIX = ".manifest.json"
MANIFEST_FORMAT = "statemachine-log-copy"


@dataclass(frozen=True)
class CopyManifest:
    """What an upload writes beside the copy: its checksum and size, and the log's identity."""

    sha256: str
    """The copy's SHA-256 (hex)."""
    size: int
    """The copy's size in bytes."""
    accepts: tuple[str, ...] = ()
    """Every checksum this manifest vouches for: the copy's, and those of the whole copies
    before it (an upload killed before its move leaves one of them in place)."""
    log_id: str | None = None
    """The identity (``experiments.log_id``) of the log the copy is of."""
    experiment: str | None = None
    storage_path: str | None = None
    progress: tuple[int, int] | None = None
    """How far the log got: (newest driver session's epoch, events)."""

    def to_json(self) -> str:
        """The manifest file's text."""
        data: dict[str, Any] = {"format": MANIFEST_FORMAT, "format_version": 1, **asdict(self)}
        data["accepts"] = list(self.accepts or (self.sha256,))
        data["progress"] = list(self.progress) if self.progress else None
        return json.dumps(data, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, where: str) -> CopyManifest:
        """Read a manifest file; :class:`LogCopyRefusedError` when it is not one."""
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT:
                raise ValueError("not a statemachine log copy manifest")
            accepts = tuple(str(s) for s in data.get("accepts") or [data["sha256"]])
            found = data.get("progress")
            progress = (int(found[0]), int(found[1])) if found else None
            return cls(
                sha256=str(data["sha256"]), size=int(data["size"]), accepts=accepts,
                log_id=_text(data.get("log_id")), experiment=_text(data.get("experiment")),
                storage_path=_text(data.get("storage_path")), progress=progress,
            )  # fmt: skip
        except (ValueError, KeyError, TypeError) as exc:
            raise LogCopyRefusedError(
                f"the checksum file {where} cannot be read ({exc}); nothing was replaced or "
                "uploaded: delete it to use the copy beside it as it is"
            ) from None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def sha256_of(path: Path) -> str:
    """The SHA-256 (hex) of a file's content."""
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while chunk := source.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def manifest_for(path: Path, *, log_id: str | None, experiment: str | None,
                 storage_path: str | None,
                 progress: tuple[int, int] | None = None) -> CopyManifest:
    """The manifest of the copy at ``path`` (its checksum and size, the log's identity and
    how far it got)."""
    return CopyManifest(sha256=sha256_of(path), size=path.stat().st_size, log_id=log_id,
                        experiment=experiment, storage_path=storage_path, progress=progress)


def size_problem(path: Path) -> str | None:
    """Why the file's size is not the one its SQLite header records (``None``: it is, or the
    file is not a SQLite database at all, which opening it reports)."""
    with path.open("rb") as source:
        header = source.read(_HEADER_BYTES)
    if len(header) < _HEADER_BYTES or not header.startswith(SQLITE_MAGIC):
        return None
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    size = os.path.getsize(path)
    pages = int.from_bytes(header[28:32], "big")
    if header[24:28] == header[92:96] and pages > 0:
        expected = pages * page_size
        if size != expected:
            return (f"it is {size} bytes where its SQLite header says {expected} ({pages} "
                    f"pages of {page_size})")
    elif page_size and size % page_size:
        return f"it is {size} bytes, not a whole number of its {page_size}-byte pages"
    return None


def check_copy(path: Path, label: str, manifest: CopyManifest | None) -> None:
    """Refuse a downloaded copy (``path``, from ``label``) that is not whole.

    Raises :class:`LogCopyRefusedError` naming what is wrong and the fix; nothing else is
    read or changed.
    """
    problem = size_problem(path)
    if problem is not None:
        raise LogCopyRefusedError(
            f"the event log copy at {label} is torn ({problem}); it was not used and nothing "
            "was replaced or uploaded: put a whole copy there (or move it away to keep the "
            "local log)"
        )
    if manifest is None:
        return
    found = sha256_of(path)
    if found not in (manifest.accepts or (manifest.sha256,)):
        raise LogCopyRefusedError(
            f"the event log copy at {label} does not match the checksum written beside it "
            f"at upload (sha256 {found[:16]}..., {path.stat().st_size} bytes; the manifest "
            f"says {manifest.sha256[:16]}..., {manifest.size} bytes): a torn or replaced "
            f"copy; it was not used and nothing was replaced or uploaded. If you put it "
            f"there yourself, delete {label}{MANIFEST_SUFFIX}"
        )
