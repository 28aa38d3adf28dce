"""The local SQLite log and its copy on the experiment's storage, through a pyarrow filesystem.

These use pyarrow's local filesystem as the storage (the same calls as S3's; the S3 scenario
is in test_tune_s3.py): consistent copies while a driver writes, the newest log brought back
before a driver opens it, failed uploads retried and reported, and what the loop pays.
"""

from __future__ import annotations

import logging
import shutil
import sqlite3
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from statemachine.domain.events import TrialAdded, TrialStarted
from statemachine.domain.policy import RetryPolicy
from statemachine.exceptions import LogSyncError
from statemachine.log import EventStore, ExperimentLog
from statemachine.log.remote import RemoteFile
from statemachine.log.sqlite_copy import LogProgress, consistent_copy, log_progress
from statemachine.tune.log_sync import LogSync, bring_newest


def local_fs():  # type: ignore[no-untyped-def]
    import pyarrow.fs

    return pyarrow.fs.LocalFileSystem()


def write_log(path: Path, trials: int, experiment: str = "exp") -> None:
    """One driver session recording ``trials`` new trials (two events each), closed cleanly."""
    log = ExperimentLog.open(path, experiment, RetryPolicy())
    try:
        known = len(log.states())
        for i in range(known, known + trials):
            log.record(f"t{i}", TrialAdded(config={"i": i}))
            log.record(f"t{i}", TrialStarted(restore_from=None))
    finally:
        log.close()


def test_a_copy_taken_while_a_driver_appends_is_a_complete_log(tmp_path: Path) -> None:
    source, copy = tmp_path / "live.db", tmp_path / "copy.db"
    log = ExperimentLog.open(source, "exp", RetryPolicy())
    stop = threading.Event()
    written = 0

    def append() -> None:
        nonlocal written
        while not stop.is_set():
            log.record(f"t{written}", TrialAdded(config={}))
            written += 1

    writer = threading.Thread(target=append)
    writer.start()
    try:
        seen = []
        for _ in range(20):
            consistent_copy(source, copy)
            assert not copy.with_name("copy.db-wal").exists()  # one self-contained file
            with sqlite3.connect(copy) as check:
                assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)
                assert check.execute("PRAGMA journal_mode").fetchone() == ("delete",)
            seen.append(log_progress(copy).events)
    finally:
        stop.set()
        writer.join()
        log.close()
    assert seen == sorted(seen) and seen[-1] > 0
    assert log_progress(source) == LogProgress(epoch=1, events=written)


def test_the_newest_log_is_brought_back_and_an_older_one_kept(tmp_path: Path) -> None:
    storage = tmp_path / "storage" / "exp" / "statemachine.db"
    local = tmp_path / "home" / "statemachine.db"
    remote = RemoteFile(local_fs(), str(storage))

    # Nothing stored yet: nothing happens.
    assert bring_newest(local, remote) is None and not local.exists()

    # A new head node: no local copy, the storage's is taken.
    write_log(tmp_path / "first.db", trials=3)
    remote.upload(tmp_path / "first.db")
    assert "no local event log" in (bring_newest(local, remote) or "")
    assert log_progress(local) == LogProgress(1, 6)

    # The local copy is newer (a later session here): it stays.
    write_log(local, trials=1)
    assert bring_newest(local, remote) is None
    assert log_progress(local) == LogProgress(2, 8)

    # The storage's copy is newer: it replaces the local one, which is kept beside it.
    shutil.copy(local, tmp_path / "second.db")
    write_log(tmp_path / "second.db", trials=2, experiment="exp")
    remote.upload(tmp_path / "second.db")
    message = bring_newest(local, remote) or ""
    assert "newer than the local copy" in message
    assert log_progress(local) == LogProgress(3, 12)
    (aside,) = local.parent.glob("statemachine.db.replaced-*[0-9]Z")
    assert log_progress(aside) == LogProgress(2, 8)
    assert sorted(p.name for p in storage.parent.iterdir()) == ["statemachine.db"]


def test_an_unreadable_copy_on_storage_is_refused_and_the_local_log_kept(
    tmp_path: Path,
) -> None:
    storage = tmp_path / "storage" / "statemachine.db"
    storage.parent.mkdir()
    storage.write_bytes(b"not a database" * 100)
    local = tmp_path / "home" / "statemachine.db"
    write_log(local, trials=1)
    with pytest.raises(LogSyncError, match="not a readable event log"):
        bring_newest(local, RemoteFile(local_fs(), str(storage)))
    assert log_progress(local) == LogProgress(1, 2)
    assert sorted(p.name for p in local.parent.iterdir()) == ["statemachine.db"]


class HeldRemote(RemoteFile):
    """A remote file whose first upload waits until the test releases it."""

    def __init__(self, fs: Any, path: str) -> None:
        super().__init__(fs, path)
        self.uploading, self.release = threading.Event(), threading.Event()

    def upload(self, local: Path, *args: Any) -> None:
        self.uploading.set()
        assert self.release.wait(30), "the test never released the upload"
        super().upload(local, *args)


def test_uploads_return_at_once_and_coalesce(tmp_path: Path) -> None:
    local = tmp_path / "home" / "statemachine.db"
    write_log(local, trials=50)
    storage = tmp_path / "storage" / "statemachine.db"
    remote = HeldRemote(local_fs(), str(storage))
    sync = LogSync(local, remote)
    sync.request()
    assert sync.stats.requests == 0, "nothing is uploaded before prepare()"
    sync.prepare()
    sync.request()
    assert remote.uploading.wait(30), "the first request started no upload"
    write_log(local, trials=1)  # new events while the first upload is held
    for _ in range(99):
        sync.request()
    remote.release.set()
    assert sync.close(timeout=30)
    assert sync.stats.requests == 100
    # the 99 requests made during the held upload became exactly one more upload
    assert sync.stats.uploads == 2
    assert sync.stats.blocked_max_s < 0.05  # the caller never waits for a copy or upload
    assert log_progress(storage) == log_progress(local)


def test_an_unchanged_log_is_not_uploaded_again_and_leftovers_are_removed(
    tmp_path: Path,
) -> None:
    local = tmp_path / "home" / "statemachine.db"
    write_log(local, trials=2)
    storage = tmp_path / "storage" / "statemachine.db"
    storage.parent.mkdir()
    leftover = storage.parent / ".statemachine.db.uploading-0123456789ab"
    leftover.write_bytes(b"half an upload of a killed driver")
    half_manifest = storage.parent / ".statemachine.db.manifest.json.uploading-0123456789ab"
    half_manifest.write_bytes(b'{"format": "statemac')
    sync = LogSync(local, RemoteFile(local_fs(), str(storage)))
    sync.prepare()
    assert not leftover.exists() and not half_manifest.exists()
    sync.request(7)
    assert sync.flush(timeout=30)
    sync.request(7)  # nothing written since: no upload
    sync.request(7)
    assert not sync.pending and sync.stats.requests == 1
    sync.request(8)
    sync.request()  # None: always
    assert sync.close(timeout=30)
    assert sync.stats.requests == 3
    assert sorted(p.name for p in storage.parent.iterdir()) == [
        "statemachine.db", "statemachine.db.manifest.json"]


def test_a_failed_upload_is_retried_reported_and_recovers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    local = tmp_path / "home" / "statemachine.db"
    write_log(local, trials=2)
    blocker = tmp_path / "storage"
    blocker.write_text("a file where the experiment folder should be")
    sync = LogSync(local, RemoteFile(local_fs(), str(blocker / "exp" / "statemachine.db")),
                   attempts=2, backoff_s=0.01, cooldown_s=0.2)
    sync.prepare()
    with caplog.at_level(logging.WARNING, logger="statemachine"):
        sync.request()
        assert not sync.flush(timeout=10)
        assert sync.stats.failures == 2 and sync.pending
        assert any("failed 2 times" in r.getMessage() for r in caplog.records)

        blocker.unlink()  # the storage works again: the retry after the cool-down succeeds
        assert sync.flush(timeout=10)
        assert any("uploaded to" in r.getMessage() and "again" in r.getMessage()
                   for r in caplog.records)
        assert sync.close(timeout=10)
    assert log_progress(blocker / "exp" / "statemachine.db") == log_progress(local)


def test_an_upload_that_never_works_is_an_error_at_the_end(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    local = tmp_path / "home" / "statemachine.db"
    write_log(local, trials=1)
    blocker = tmp_path / "storage"
    blocker.write_text("not a folder")
    sync = LogSync(local, RemoteFile(local_fs(), str(blocker / "statemachine.db")),
                   attempts=1, backoff_s=0.01, cooldown_s=0.05)
    sync.prepare()
    sync.request()
    with caplog.at_level(logging.ERROR, logger="statemachine"):
        assert not sync.close(timeout=5)
    (error,) = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert "could not be uploaded" in error and str(local) in error


def test_a_log_read_from_a_downloaded_copy(tmp_path: Path) -> None:
    from statemachine.log.remote import downloaded

    write_log(tmp_path / "src.db", trials=2)
    folder = tmp_path / "bucket" / "runs" / "exp"
    RemoteFile(local_fs(), str(folder / "statemachine.db")).upload(tmp_path / "src.db")
    # pyarrow's local filesystem stands in for s3:// here; the CLI test uses the S3 server.
    with downloaded(f"file://{folder}") as copy:
        assert copy.exists()
        store = EventStore.open(copy, create=False)
        try:
            assert [e.name for e in store.list_experiments()] == ["exp"]
        finally:
            store.close()
    assert not copy.exists() and not copy.parent.exists()
    with pytest.raises(LogSyncError, match="no event log at"):
        with downloaded(f"file://{tmp_path / 'nothing'}"):
            pass


class Killed(BaseException):
    """The uploading process dies here: nothing after it runs (no except, no finally)."""


class _MoveDies:
    """A filesystem whose move of the copy into place fails with ``error``."""

    def __init__(self, fs: Any, target: str, error: BaseException) -> None:
        self._fs, self._target, self._error = fs, target, error

    def move(self, source: str, destination: str) -> None:
        if destination == self._target:
            raise self._error
        self._fs.move(source, destination)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fs, name)


def upload_version(local: Path, remote: RemoteFile, scratch: Path) -> None:
    """One upload as LogSync makes it: a consistent copy, its manifest, the previous one."""
    from statemachine.log.copy_check import manifest_for

    copy = scratch / f"copy-{uuid.uuid4().hex}.db"
    consistent_copy(local, copy)
    manifest = manifest_for(copy, log_id="a-log", experiment="exp", storage_path=None)
    remote.upload(copy, manifest, remote.read_manifest())


def test_the_copy_stays_vouched_for_when_uploads_die_before_their_move(tmp_path: Path) -> None:
    local = tmp_path / "home" / "statemachine.db"
    write_log(local, trials=1)
    storage = tmp_path / "storage" / "statemachine.db"
    remote = RemoteFile(local_fs(), str(storage))
    upload_version(local, remote, tmp_path)
    whole = storage.read_bytes()
    for _ in range(2):  # twice in a row, a kill after the manifest was written, before the move
        write_log(local, trials=1)
        dying = RemoteFile(local_fs(), str(storage))
        dying.fs = _MoveDies(dying.fs, str(storage), Killed())
        with pytest.raises(Killed):
            upload_version(local, dying, tmp_path)
    assert storage.read_bytes() == whole  # the first upload's copy, still accepted
    assert remote.download_checked(tmp_path / "fetched.db")
    assert log_progress(tmp_path / "fetched.db") == LogProgress(1, 2)
    # A move that fails (an error, not a kill) puts the manifest back as it was.
    manifest = (storage.parent / "statemachine.db.manifest.json").read_bytes()
    write_log(local, trials=1)
    failing = RemoteFile(local_fs(), str(storage))
    failing.fs = _MoveDies(failing.fs, str(storage), OSError("permission denied"))
    with pytest.raises(LogSyncError, match="permission denied"):
        upload_version(local, failing, tmp_path)
    assert (storage.parent / "statemachine.db.manifest.json").read_bytes() == manifest
    # The next upload that works replaces both; the killed uploads' leftovers are cleared.
    upload_version(local, remote, tmp_path)
    assert remote.download_checked(tmp_path / "fetched-last.db")
    assert log_progress(tmp_path / "fetched-last.db") == LogProgress(4, 8)
    assert remote.remove_leftovers() == 2


def test_a_log_kept_by_an_older_statemachine_is_taken_over_only_for_its_own_storage(
    tmp_path: Path,
) -> None:
    from statemachine.tune.copy_choice import take_over_legacy

    legacy = tmp_path / "ray_results" / "exp" / "statemachine.db"
    log = ExperimentLog.open(legacy, "exp", RetryPolicy(), storage_path="bucket-b/exps/exp")
    log.record("t0", TrialAdded(config={}))
    log.close()
    before = legacy.read_bytes()
    # Another experiment named exp (stored on bucket A): the old file is not its log.
    on_a = legacy.parent / "s3-aaaaaaaaaaaa" / "statemachine.db"
    assert take_over_legacy(legacy, on_a, "exp", "bucket-a/exps/exp") is None
    assert not on_a.exists()
    # Its own experiment (bucket B): a copy goes to the keyed place; the old file stays as it was.
    on_b = legacy.parent / "s3-bbbbbbbbbbbb" / "statemachine.db"
    message = take_over_legacy(legacy, on_b, "exp", "bucket-b/exps/exp") or ""
    assert f"{legacy} (written by an older statemachine) copied to {on_b}" in message
    assert log_progress(on_b) == log_progress(legacy) == LogProgress(1, 1)
    assert legacy.read_bytes() == before
    assert take_over_legacy(legacy, on_b, "exp", "bucket-b/exps/exp") is None  # once
