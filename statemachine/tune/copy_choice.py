"""Which copy of an experiment's log is used: the local file or its copy on storage.

Only copies of the same log are compared, by how far they got
(:class:`~statemachine.log.sqlite_copy.LogProgress`): a copy whose identity (its experiment's
``log_id``, else its storage path) differs from the local log's, one that is torn (see
:mod:`statemachine.log.copy_check`), not an event log, or a folder is refused with
:class:`~statemachine.exceptions.LogCopyRefusedError`, changing nothing. The same rules keep
an upload from replacing another log's copy, or a copy further along
(:mod:`statemachine.tune.log_sync`).
"""

from __future__ import annotations

import os
import uuid
from datetime import datetime, timezone
from pathlib import Path

from statemachine.exceptions import LogCopyRefusedError, StoreError
from statemachine.log.copy_check import CopyManifest
from statemachine.log.remote import RemoteFile
from statemachine.log.sqlite_copy import (
    LogFacts,
    LogIdentity,
    LogProgress,
    consistent_copy,
    log_facts,
)


def bring_newest(local: Path, remote: RemoteFile, experiment: str | None = None) -> str | None:
    """Make ``local`` the newest of the local log and the one on storage; says what it did.

    The newer log is the one with the later driver session, then more events
    (:class:`~statemachine.log.sqlite_copy.LogProgress`), of two copies of the same log: a
    copy whose identity (of ``experiment``) differs from the local log's, a torn one, or one
    that is not an event log raises :class:`LogCopyRefusedError` and changes nothing. A
    local log that is replaced is kept beside it (``statemachine.db.replaced-<UTC time>``),
    never deleted. Returns a message when the storage's copy was taken, ``None`` when the
    local one stays. Raises :class:`LogSyncError` when the storage cannot be read.
    """
    local.parent.mkdir(parents=True, exist_ok=True)
    fetched = local.with_name(f"{local.name}.download-{uuid.uuid4().hex[:12]}")
    try:
        if not remote.download_checked(fetched):
            return None
        try:
            theirs = log_facts(fetched, check_pages=True)
        except StoreError as exc:
            raise LogCopyRefusedError(
                f"the event log copy at {remote.label} is not a readable event log ({exc}); "
                "move it away to keep the local log"
            ) from exc
        if local.exists():
            try:
                ours: LogFacts | None = log_facts(local)
            except StoreError:
                ours = None  # unreadable: the storage's copy is the better one
            if ours is not None:
                refuse_another_log(ours.identity(experiment), theirs.identity(experiment),
                                   local, remote)
                if ours.progress >= theirs.progress:
                    return None
            aside = _move_aside(local)
            os.replace(fetched, local)
            return (f"the event log at {remote.label} is newer than the local copy: using it "
                    f"(the local copy is kept as {aside})")
        os.replace(fetched, local)
        return f"no local event log: using the copy downloaded from {remote.label}"
    finally:
        for leftover in (fetched, fetched.with_name(fetched.name + "-journal")):
            leftover.unlink(missing_ok=True)


def refuse_another_log(ours: LogIdentity | None, theirs: LogIdentity | None, local: Path,
                       remote: RemoteFile) -> None:
    """Raise :class:`LogCopyRefusedError` (one line naming both) when the copy on storage
    and the local log are not copies of the same log."""
    if ours is None or theirs is None or ours.same_log(theirs):
        return
    raise LogCopyRefusedError(
        f"the event log copy at {remote.label} ({theirs.describe()}) is another log than the "
        f"local one at {local} ({ours.describe()}): neither was used, replaced or uploaded "
        "over; move one of them away to use the other"
    )


def _move_aside(local: Path) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    aside = local.with_name(f"{local.name}.replaced-{stamp}")
    # The write-ahead log belongs to its database: it moves with it (a stale -wal beside the
    # new file would be replayed into it).
    for suffix in ("-wal", "-shm"):
        part = local.with_name(local.name + suffix)
        if part.exists():
            os.replace(part, aside.with_name(aside.name + suffix))
    os.replace(local, aside)
    return aside


def refuse_an_older_copy(ours: LogProgress, previous: CopyManifest, local: Path,
                         remote: RemoteFile) -> None:
    """Raise :class:`LogCopyRefusedError` when the copy on storage got further than the
    local log (a newer driver's, or the local file was replaced by an older one): an
    upload would replace it with less."""
    if previous.progress is None:
        return
    theirs = LogProgress(*previous.progress)
    if ours < theirs:
        raise LogCopyRefusedError(
            f"the event log copy at {remote.label} is further along (driver session "
            f"{theirs.epoch}, {theirs.events} events) than the local log at {local} (session "
            f"{ours.epoch}, {ours.events} events): not replaced; another driver may have "
            "taken the experiment over, or the local file was replaced by an older one"
        )


def identity_of(manifest: CopyManifest) -> LogIdentity | None:
    if manifest.experiment is None:
        return None
    return LogIdentity(manifest.experiment, manifest.log_id, manifest.storage_path)


def take_over_legacy(legacy: Path, local: Path, experiment: str | None,
                     storage_path: str | None) -> str | None:
    """Copy the log an older statemachine kept at ``legacy`` (keyed by the experiment's
    name only) to ``local`` (keyed by where it is stored), when ``local`` does not exist yet
    and the legacy log records this same storage path; says what it did.

    Another experiment's log of the same name is left where it is, untouched; so is the
    legacy file (a consistent copy is taken: a driver may still write it).
    """
    if local.exists() or not legacy.is_file() or storage_path is None:
        return None
    try:
        found = log_facts(legacy).identity(experiment)
    except StoreError:
        return None
    if found is None or found.storage_path != storage_path:
        return None
    local.parent.mkdir(parents=True, exist_ok=True)
    consistent_copy(legacy, local)
    return (f"the local event log is now kept per storage location: {legacy} (written by an "
            f"older statemachine) copied to {local}; the old file can be deleted")
