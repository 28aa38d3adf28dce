"""The local SQLite log follows the experiment to its storage (S3, GCS, ...), and comes back.

When a Tune experiment is stored remotely and no log URL is given, the log is a SQLite file on
the driver (appends stay local and fast). :class:`LogSync` keeps the experiment folder on the
storage holding a consistent copy of it:

- :meth:`LogSync.prepare` runs before the log is opened: when the storage holds a log newer
  than the local one (or there is no local one: a new head node after ``Tuner.restore``), it
  is downloaded first, so the callback reconciles Ray's trials with the newest counters. A
  failed download raises (the log is not opened, and so never uploaded over a good copy).
- Only copies of the same log are compared: every log has an identity (a random id written
  when its experiment is created, and where the experiment is stored), and a copy on storage
  whose identity differs from the local log's is refused with one line naming both
  (:class:`~statemachine.exceptions.LogCopyRefusedError`): it is neither adopted nor
  replaced, and nothing is uploaded over it. So is a torn copy (its size against its SQLite
  header, its checksum against the manifest written beside it at upload:
  :mod:`statemachine.log.copy_check`) and a folder where the copy should be. Which copy is
  used is :mod:`statemachine.tune.copy_choice`'s rule; this module moves the copies.
- :meth:`LogSync.request` asks for an upload (after a failure and its decision, with each of
  Tune's experiment checkpoints). It returns at once: a background thread takes a consistent
  copy (SQLite's backup API) and uploads it under a temporary name moved over the old copy.
  Requests made during an upload coalesce into one more upload.
- A failed upload is retried (``attempts`` with a doubling backoff), then again after a
  cool-down, and reported like a failed write: a warning when it fails, a warning when it
  works again, an error at the end when the storage never got the newest copy.
"""

from __future__ import annotations

import logging
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from statemachine.exceptions import LogCopyRefusedError, LogSyncError, StoreError
from statemachine.log.copy_check import MANIFEST_SUFFIX, manifest_for
from statemachine.log.remote import RemoteFile
from statemachine.log.sqlite_copy import consistent_copy, log_facts
from statemachine.tune.copy_choice import (
    bring_newest,
    identity_of,
    refuse_an_older_copy,
    refuse_another_log,
    take_over_legacy,
)

__all__ = ["LogSync", "UploadStats", "bring_newest"]

logger = logging.getLogger(__name__)


@dataclass
class UploadStats:
    """What the uploads cost (seconds), for this driver."""

    uploads: int = 0
    """Uploads that completed."""
    failures: int = 0
    """Failed upload attempts."""
    requests: int = 0
    """Upload requests (each returns at once)."""
    blocked_s: float = 0.0
    """Time the requesting threads (Tune's loop) spent in :meth:`LogSync.request`, in all."""
    blocked_max_s: float = 0.0
    """The longest single :meth:`LogSync.request`."""
    upload_s: float = 0.0
    """Time spent copying and uploading, in all (in the background thread)."""
    upload_max_s: float = 0.0
    """The longest copy and upload."""
    last_bytes: int = 0
    """Size of the last copy uploaded."""


class LogSync:
    """Keeps a copy of the local SQLite log ``local`` at ``remote``, in the background.

    Args:
        local: the SQLite file the driver writes.
        remote: where the copy goes (the experiment folder on the storage filesystem).
        attempts: upload attempts before the upload is left for later.
        backoff_s: sleep before the second attempt (doubled each time).
        cooldown_s: after ``attempts`` failed ones, how long until the next try.
    """

    def __init__(self, local: Path, remote: RemoteFile, *, experiment: str | None = None,
                 storage_path: str | None = None, legacy: Path | None = None,
                 attempts: int = 3, backoff_s: float = 0.5, cooldown_s: float = 10.0) -> None:
        self.local = local
        self.remote = remote
        self.experiment = experiment
        """The experiment whose log this is (its identity is the one compared)."""
        self.storage_path = storage_path
        """Where the experiment is stored, as its log records it."""
        self.legacy = legacy
        """Where an older statemachine kept this log (keyed by the experiment's name only):
        taken over once when it is this experiment's (:func:`take_over_legacy`)."""
        self.refused: str | None = None
        """Why nothing more is uploaded (another log's copy is on storage)."""
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.cooldown_s = cooldown_s
        self.stats = UploadStats()
        self.ready = False
        """True once :meth:`prepare` succeeded: only then is anything uploaded."""
        self.last_error: str | None = None
        self._cond = threading.Condition()
        self._requested = 0  # generation of the newest request
        self._uploaded = 0  # generation whose request an upload completed after
        self._rounds = 0  # finished upload rounds (successful or not)
        self._retry_at = 0.0
        self._urgent = False
        self._closing = False
        self._thread: threading.Thread | None = None
        self._version: int | None = None

    # ------------------------------------------------------------------ before opening

    def prepare(self) -> None:
        """Bring the newest log to ``local`` (once); raises :class:`LogSyncError` on failure."""
        if self.ready:
            return
        if self.legacy is not None:
            taken = take_over_legacy(self.legacy, self.local, self.experiment,
                                     self.storage_path)
            if taken:
                logger.warning("statemachine: %s", taken)
        message = bring_newest(self.local, self.remote, self.experiment)
        if message:
            logger.warning("statemachine: %s", message)
        try:
            removed = self.remote.remove_leftovers()
        except LogSyncError as exc:  # tidying only: uploads may still work
            logger.warning("statemachine: %s", exc)
        else:
            if removed:
                logger.info("statemachine: removed %d unfinished upload(s) beside %s",
                            removed, self.remote.label)
        self.ready = True

    # ------------------------------------------------------------------ uploads

    def request(self, version: int | None = None) -> None:
        """Ask for an upload of the log as it is now; returns at once.

        ``version``: a number that changes whenever the log does (the events this driver
        wrote); a request with the version of the previous one is skipped. ``None`` always
        uploads.
        """
        started = time.perf_counter()
        with self._cond:
            unchanged = version is not None and version == self._version
            self._version = version
            if self.ready and not self._closing and not unchanged:
                self._requested += 1
                self.stats.requests += 1
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="statemachine-log-upload", daemon=True
                    )
                    self._thread.start()
                self._cond.notify_all()
        blocked = time.perf_counter() - started
        self.stats.blocked_s += blocked
        self.stats.blocked_max_s = max(self.stats.blocked_max_s, blocked)

    @property
    def pending(self) -> bool:
        """Whether a requested upload has not completed yet."""
        with self._cond:
            return self._uploaded < self._requested

    def flush(self, timeout: float) -> bool:
        """Wait (at most ``timeout`` s) until every request so far is uploaded; retries a
        failing upload at once. True when the storage holds the newest copy."""
        deadline = time.monotonic() + timeout
        with self._cond:
            target, rounds = self._requested, self._rounds
            if self._uploaded >= target:
                return True
            self._urgent = True
            self._cond.notify_all()
            while self._uploaded < target:
                failed_after_flush = self._rounds > rounds and self._retry_at > 0
                left = deadline - time.monotonic()
                if failed_after_flush or left <= 0 or self._thread is None:
                    return False
                self._cond.wait(left)
            return True

    def close(self, timeout: float = 60.0) -> bool:
        """Upload what was requested (waiting at most ``timeout`` s) and stop the thread.

        Returns True when the storage holds the newest copy; reports an error otherwise.
        """
        done = self.flush(timeout)
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=max(0.0, min(timeout, 5.0)))
        if not done and self.refused is None:  # a refusal was reported when it happened
            logger.error(
                "statemachine: the event log could not be uploaded to %s (%s); the newest copy "
                "is %s: copy it there (and delete %s%s, the checksum of the copy it replaces) "
                "before Tuner.restore on another machine",
                self.remote.label, self.last_error or "timed out", self.local,
                self.remote.label, MANIFEST_SUFFIX,
            )
        return done

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._closing:
                        return
                    due = self._uploaded < self._requested
                    wait = self._retry_at - time.monotonic() if not self._urgent else 0.0
                    if due and wait <= 0:
                        break
                    self._cond.wait(wait if due else None)
                target = self._requested
                self._urgent = False
            ok = self._upload_round()
            with self._cond:
                self._rounds += 1
                if ok:
                    self._uploaded = max(self._uploaded, target)
                    self._retry_at = 0.0
                else:
                    self._retry_at = time.monotonic() + self.cooldown_s
                self._cond.notify_all()

    def _upload_round(self) -> bool:
        if self.refused is not None:
            return False
        delay = self.backoff_s
        for attempt in range(1, self.attempts + 1):
            started = time.perf_counter()
            try:
                self._upload_once()
            except LogCopyRefusedError as exc:  # never retried: another log is there
                self.stats.failures += 1
                self.last_error = self.refused = str(exc)
                logger.error("statemachine: %s", exc)
                return False
            except (LogSyncError, StoreError, OSError) as exc:
                self.stats.failures += 1
                self.last_error = str(exc)
                if attempt < self.attempts:
                    time.sleep(delay)
                    delay *= 2
                    continue
                logger.warning(
                    "statemachine: uploading the event log to %s failed %d times (%s); "
                    "retried in %.0f s and at the end of the experiment",
                    self.remote.label, self.attempts, exc, self.cooldown_s,
                )
                return False
            took = time.perf_counter() - started
            self.stats.uploads += 1
            self.stats.upload_s += took
            self.stats.upload_max_s = max(self.stats.upload_max_s, took)
            if self.last_error is not None:
                self.last_error = None
                logger.warning(
                    "statemachine: the event log is uploaded to %s again (%d failed upload "
                    "attempt(s) so far)", self.remote.label, self.stats.failures,
                )
            return True
        return False  # pragma: no cover - the loop always returns

    def _upload_once(self) -> None:
        folder = Path(tempfile.mkdtemp(prefix="statemachine-upload-"))
        try:
            copy = folder / self.local.name
            self.stats.last_bytes = consistent_copy(self.local, copy)
            facts = log_facts(copy)
            ours = facts.identity(self.experiment)
            manifest = manifest_for(
                copy, log_id=ours.log_id if ours else None,
                experiment=ours.experiment if ours else self.experiment,
                storage_path=ours.storage_path if ours else self.storage_path,
                progress=(facts.progress.epoch, facts.progress.events),
            )  # fmt: skip
            previous = self.remote.read_manifest()
            if previous is not None:
                if ours is not None:
                    refuse_another_log(ours, identity_of(previous), self.local, self.remote)
                refuse_an_older_copy(facts.progress, previous, self.local, self.remote)
            self.remote.upload(copy, manifest, previous)
        finally:
            for item in folder.iterdir():
                item.unlink(missing_ok=True)
            folder.rmdir()

