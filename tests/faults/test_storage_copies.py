"""The event log's copy on an experiment's storage (a real S3 API: moto's server on 127.0.0.1).

Only a whole copy of the same log is ever adopted, replaced or uploaded over:

- a copy torn at its end (its size against the SQLite header, its checksum against the
  manifest written beside it at upload), a folder where the copy should be, and a copy of
  another log of the same name are refused with one line, changing nothing (issue 23, items
  1 and 3);
- eight kinds of bad copy, each refused with the good local log byte-identical;
- an uploader SIGKILLed mid-upload never leaves a partial object: the copy on storage is
  always a whole one its manifest vouches for.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from statemachine import CheckpointSaved, RetryPolicy, TrialAdded, TrialStarted
from statemachine.exceptions import LogCopyRefusedError
from statemachine.log import EventStore, ExperimentLog, verify
from statemachine.log.remote import RemoteFile
from statemachine.log.sqlite_copy import log_facts
from statemachine.tune.log_sync import LogSync
from tests.faults.faultkit import (
    REPO,
    Figures,
    LogCount,
    captured,
    check_log,
    run_cli,
    worker_pythonpath,
)
from tests.ray_support import running_ray
from tests.s3_server import S3Server

pytestmark = [pytest.mark.faults]


def new_remote(s3: S3Server, experiment: str = "exp") -> tuple[RemoteFile, str]:
    """An empty bucket's experiment folder: the log's remote file and its ``s3://`` folder."""
    bucket = f"copies-{uuid.uuid4().hex[:10]}"
    s3.make_bucket(bucket)
    folder = f"{bucket}/exps/{experiment}"
    return RemoteFile(s3.filesystem(), f"{folder}/statemachine.db"), f"s3://{folder}"


def write_log(path: Path, *, trials: int = 2, storage_path: str = "b/exps/exp",
              experiment: str = "exp") -> None:
    """One driver session recording ``trials`` new trials (three events each)."""
    with ExperimentLog.open(path, experiment, RetryPolicy(), storage_path=storage_path) as log:
        known = len(log.states())
        for i in range(known, known + trials):
            log.record(f"t{i}", TrialAdded(config={"i": i}))
            log.record(f"t{i}", TrialStarted())
            log.record(f"t{i}", CheckpointSaved(f"ckpt-{i}"))


def sync_for(local: Path, remote: RemoteFile, storage_path: str = "b/exps/exp") -> LogSync:
    return LogSync(local, remote, experiment="exp", storage_path=storage_path,
                   attempts=1, backoff_s=0.01, cooldown_s=0.05)


def upload(local: Path, remote: RemoteFile, storage_path: str = "b/exps/exp") -> None:
    """What a driver does: bring the newest log, then upload a copy (with its manifest)."""
    sync = sync_for(local, remote, storage_path)
    sync.prepare()
    sync.request()
    assert sync.close(timeout=60), sync.last_error


def object_bytes(remote: RemoteFile, path: str | None = None) -> bytes:
    with remote.fs.open_input_stream(path or remote.path) as source:
        return bytes(source.read())


def put_object(remote: RemoteFile, data: bytes, path: str | None = None) -> None:
    with remote.fs.open_output_stream(path or remote.path) as out:
        out.write(data)


def folder_state(folder: Path) -> dict[str, str]:
    """Every file in ``folder`` with the hash of its content."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def storage_state(remote: RemoteFile) -> dict[str, str]:
    import pyarrow.fs

    folder = remote.path.rpartition("/")[0]
    found = remote.fs.get_file_info(pyarrow.fs.FileSelector(folder, recursive=True))
    return {i.path: hashlib.sha256(object_bytes(remote, i.path)).hexdigest()
            for i in found if i.type == pyarrow.fs.FileType.File}


# ------------------------------------------------------------------ issue 23, item 3


@pytest.mark.parametrize("manifest", ["with its manifest", "uploaded before manifests"])
def test_a_copy_missing_its_last_byte_is_refused_on_a_new_head_node(
    s3_env: S3Server, tmp_path: Path, manifest: str
) -> None:
    remote, folder = new_remote(s3_env)
    write_log(tmp_path / "first" / "statemachine.db", trials=3)
    upload(tmp_path / "first" / "statemachine.db", remote)
    whole = object_bytes(remote)
    put_object(remote, whole[:-1])  # the storage kept all but the last byte
    if manifest == "uploaded before manifests":
        remote.fs.delete_file(remote.manifest_path)
    before = storage_state(remote)

    new_head = tmp_path / "new-head" / "statemachine.db"
    with pytest.raises(LogCopyRefusedError) as refused:
        sync_for(new_head, remote).prepare()
    message = str(refused.value)
    assert "\n" not in message and "torn" in message and remote.label in message
    assert f"it is {len(whole) - 1} bytes where its SQLite header says {len(whole)}" in message
    assert not new_head.exists(), "the torn copy was adopted"
    assert storage_state(remote) == before

    # Reading it from the storage is refused the same way, in one line (exit 2).
    code, out, err = run_cli("--db", folder, "trials", "exp")
    assert (code, out) == (2, "")
    (line,) = err.strip().splitlines()
    assert "torn" in line


def test_a_copy_whose_checksum_differs_is_refused(s3_env: S3Server, tmp_path: Path) -> None:
    remote, _ = new_remote(s3_env)
    write_log(tmp_path / "first" / "statemachine.db", trials=3)
    upload(tmp_path / "first" / "statemachine.db", remote)
    data = bytearray(object_bytes(remote))
    data[len(data) // 2] ^= 0xFF  # one byte of a page, the size unchanged
    put_object(remote, bytes(data))
    with pytest.raises(LogCopyRefusedError, match="does not match the checksum written beside"):
        sync_for(tmp_path / "new-head" / "statemachine.db", remote).prepare()
    assert not (tmp_path / "new-head" / "statemachine.db").exists()


def test_a_folder_where_the_copy_should_be_is_refused_not_taken_for_no_copy(
    s3_env: S3Server, tmp_path: Path
) -> None:
    remote, folder = new_remote(s3_env)
    put_object(remote, b"someone's file", f"{remote.path}/child")  # statemachine.db/child
    local = tmp_path / "head" / "statemachine.db"
    sync = sync_for(local, remote)
    with pytest.raises(LogCopyRefusedError) as refused:
        sync.prepare()
    message = str(refused.value)
    assert "\n" not in message and "is a folder" in message and remote.label in message
    assert not sync.ready and not local.exists(), "the log started fresh beside a folder"
    code, _, err = run_cli("--db", folder, "experiments")
    assert code == 2 and "is a folder" in err and len(err.strip().splitlines()) == 1


# ------------------------------------------------------------------ issue 23, item 1


def test_a_copy_of_another_log_with_the_same_name_is_neither_adopted_nor_replaced(
    s3_env: S3Server, tmp_path: Path
) -> None:
    remote, _ = new_remote(s3_env)
    # Experiment "exp" stored at A: its copy on A's storage.
    theirs = tmp_path / "a" / "statemachine.db"
    write_log(theirs, trials=4, storage_path="bucket-a/exps/exp")
    upload(theirs, remote, storage_path="bucket-a/exps/exp")
    # Another experiment "exp" (stored at B) left its log where this driver looks: further
    # along (a later session), so the newest-copy rule alone would keep it and upload it.
    ours = tmp_path / "home" / "statemachine.db"
    write_log(ours, trials=1, storage_path="bucket-b/exps/exp")
    write_log(ours, trials=1, storage_path="bucket-b/exps/exp")
    local_before, storage_before = folder_state(ours.parent), storage_state(remote)

    sync = sync_for(ours, remote, storage_path="bucket-a/exps/exp")
    with pytest.raises(LogCopyRefusedError) as refused:
        sync.prepare()
    message = str(refused.value)
    assert "\n" not in message and "is another log than the local one" in message
    a_id = log_facts(theirs).identity("exp")
    b_id = log_facts(ours).identity("exp")
    assert a_id is not None and b_id is not None and a_id.log_id != b_id.log_id
    for identity in (a_id, b_id):
        assert f"stored at {identity.storage_path}, log {identity.log_id}" in message
    assert not sync.ready  # nothing is uploaded by a sync that did not prepare
    assert folder_state(ours.parent) == local_before
    assert storage_state(remote) == storage_before


def test_an_upload_over_another_logs_copy_is_refused(s3_env: S3Server, tmp_path: Path) -> None:
    remote, _ = new_remote(s3_env)
    ours = tmp_path / "home" / "statemachine.db"
    write_log(ours, trials=2)
    sync = sync_for(ours, remote)
    sync.prepare()
    # Meanwhile another driver put another log of the same name there.
    other = tmp_path / "other" / "statemachine.db"
    write_log(other, trials=5)
    upload(other, remote)
    before = storage_state(remote)
    sync.request()
    assert not sync.close(timeout=30)
    assert sync.refused is not None and "is another log than the local one" in sync.refused
    assert storage_state(remote) == before


def test_an_upload_never_replaces_a_copy_further_along(s3_env: S3Server, tmp_path: Path) -> None:
    """The local file replaced by an older backup of itself mid-run (the same log, fewer
    events): its upload would take events off the copy on storage; refused instead."""
    remote, _ = new_remote(s3_env)
    local = tmp_path / "home" / "statemachine.db"
    write_log(local, trials=1)
    backup = tmp_path / "backup.db"
    backup.write_bytes(local.read_bytes())
    write_log(local, trials=3)
    upload(local, remote)
    sync = sync_for(local, remote)
    sync.prepare()
    os.replace(backup, local)
    before = storage_state(remote)
    sync.request()
    assert not sync.close(timeout=30)
    assert sync.refused is not None and ("is further along (driver session 2, 12 events) "
                                         "than the local log") in sync.refused, sync.refused
    assert "(session 1, 3 events): not replaced" in sync.refused
    assert storage_state(remote) == before


# ------------------------------------------------------------------ kept from the red team


def foreign_database(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
        conn.execute("INSERT INTO alembic_version VALUES ('a1b2c3d4e5f6')")
        conn.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, what TEXT)")
    conn.close()


def test_bad_copies_on_storage_are_refused_and_the_local_log_kept(
    s3_env: S3Server, tmp_path: Path, reliability: Callable[[Figures], None]
) -> None:
    """Eight kinds of bad copy, each refused in one line; the good local log byte-identical,
    no file added beside it, the storage unchanged; the local log still verifies."""
    local = tmp_path / "home" / "statemachine.db"
    write_log(local, trials=3)
    good = tmp_path / "good.db"
    write_log(good, trials=5)
    scratch = tmp_path / "scratch"
    scratch.mkdir()

    def copy_with(change: Callable[[Path], None]) -> bytes:
        target = scratch / f"{uuid.uuid4().hex}.db"
        target.write_bytes(good.read_bytes())
        change(target)
        return target.read_bytes()

    def newer_revision(path: Path) -> None:
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE alembic_version SET version_num = 'f00dfeed0099'")
        conn.close()

    def another_log(remote: RemoteFile) -> None:
        write_log(scratch / "another.db", trials=2)
        upload(scratch / "another.db", remote)

    def uploaded_then(change: Callable[[bytearray], bytes]) -> Callable[[RemoteFile], None]:
        def make(remote: RemoteFile) -> None:
            scratch_copy = scratch / f"{uuid.uuid4().hex}.db"
            scratch_copy.write_bytes(local.read_bytes())
            upload(scratch_copy, remote)  # a copy of this same log, with its manifest
            put_object(remote, change(bytearray(object_bytes(remote))))
        return make

    def flip_middle(data: bytearray) -> bytes:
        data[len(data) // 2] ^= 0xFF
        return bytes(data)

    kinds: dict[str, tuple[Callable[[RemoteFile], None], str]] = {
        "not a database": (lambda r: put_object(r, b"not a database\n" * 100),
                           "not a readable event log"),
        "an empty file": (lambda r: put_object(r, b""), "not a readable event log"),
        "another application's database": (
            lambda r: put_object(r, copy_with(lambda p: (p.unlink(), foreign_database(p)))),
            "another application's schema"),
        "a newer schema revision": (lambda r: put_object(r, copy_with(newer_revision)),
                                    "newer than this statemachine knows"),
        "missing its last byte": (uploaded_then(lambda d: bytes(d[:-1])), "torn"),
        "one byte changed": (uploaded_then(flip_middle), "does not match the checksum"),
        "a folder (statemachine.db/child)": (
            lambda r: put_object(r, b"x", f"{r.path}/child"), "is a folder"),
        "another log of the same name": (another_log, "is another log than the local one"),
    }
    before = folder_state(local.parent)
    with EventStore.open(local, create=False) as store:
        events_before = Counter(e.trial_id for e in store.read_experiment("exp"))
    refusals: dict[str, str] = {}
    for kind, (make, words) in kinds.items():
        remote, _ = new_remote(s3_env)
        make(remote)
        stored = storage_state(remote)
        with pytest.raises(LogCopyRefusedError) as refused:
            sync_for(local, remote).prepare()
        refusals[kind] = message = str(refused.value)
        assert words in message and "\n" not in message, (kind, message)
        assert folder_state(local.parent) == before, f"{kind}: the local log changed"
        assert storage_state(remote) == stored, f"{kind}: the storage changed"

    def found(log: LogCount) -> dict[str, Counter[Any]]:
        return {"events": log.per_trial}

    check_log(
        f"sqlite:///{local}", "exp", scenario="Bad copies on storage",
        injected="the copy on S3 replaced by: " + ", ".join(kinds) + "; a driver prepares "
                 "its log with a good local one",
        times=len(kinds), expected={"events": events_before}, found=found,
        reliability=reliability, details={"refusals": refusals},
    )


UPLOADER = """
import os
import sys
import time
from pathlib import Path

import pyarrow.fs

from statemachine import CheckpointSaved, RetryPolicy
from statemachine.log import ExperimentLog
from statemachine.log.remote import RemoteFile
from statemachine.tune.log_sync import LogSync


class PausingBeforeMove:
    # The S3 filesystem, pausing (to be killed) when an uploaded copy is about to be moved
    # over the log's copy: the moment a kill leaves a whole unfinished upload behind.

    def __init__(self, fs, pause):
        self._fs, self._pause = fs, pause

    def __getattr__(self, name):
        return getattr(self._fs, name)

    def move(self, source, destination):
        if self._pause and ".uploading-" in source and destination.endswith(".db"):
            print("MOVING", flush=True)
            time.sleep(600)
        return self._fs.move(source, destination)


class Announcing(RemoteFile):
    def upload(self, *args):
        print("PUT", flush=True)
        started = time.perf_counter()
        super().upload(*args)
        print("DONE", time.perf_counter() - started, flush=True)


local, bucket_path, pause = Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "pause"
fs = PausingBeforeMove(
    pyarrow.fs.S3FileSystem(endpoint_override=os.environ["AWS_ENDPOINT_URL"]), pause)
sync = LogSync(local, Announcing(fs, bucket_path), experiment="exp",
               storage_path="b/exps/exp", attempts=1)
sync.prepare()
log = ExperimentLog.open(local, "exp", RetryPolicy(), storage_path="b/exps/exp")
n = 0
while True:
    log.record_many([(f"t{i}", CheckpointSaved(f"c{n}-{i}")) for i in range(50)])
    n += 1
    sync.request()
    if not sync.flush(timeout=120):
        print("FAILED", sync.last_error, flush=True)
"""


def next_line(child: subprocess.Popen[str], prefix: str) -> str:
    assert child.stdout is not None
    for line in child.stdout:
        if line.startswith(prefix):
            return line[len(prefix):].strip()
    raise AssertionError(f"no {prefix!r} from the uploader: {child.stderr.read()}")  # type: ignore[union-attr]


@pytest.mark.slow
def test_an_uploader_killed_mid_upload_never_leaves_a_partial_copy(
    s3_env: S3Server, tmp_path: Path, reliability: Callable[[Figures], None]
) -> None:
    import pyarrow.fs

    remote, _ = new_remote(s3_env)
    folder = remote.path.rpartition("/")[0]
    local = tmp_path / "home" / "statemachine.db"
    # A log of some MB, so that an upload (multipart, then a move) takes a while.
    with ExperimentLog.open(local, "exp", RetryPolicy(), storage_path="b/exps/exp") as log:
        log.record_many([(f"t{i}", TrialAdded(config={"pad": "x" * 4000})) for i in range(500)])
    seed = int(os.environ.get("STATEMACHINE_FAULT_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    env = {**os.environ, **s3_env.env, "PYTHONPATH": str(REPO)}
    seen: list[dict[str, Any]] = []
    upload_s = 0.0
    # Kills 1, 2 and 3 land between the upload of the new copy and its move over the old one
    # (the uploader waits there to be killed), so a whole unfinished upload is left behind
    # for certain, three times in a row over the same copy; the others land at a random
    # moment of an upload.
    for kill in range(6):
        at_move = kill in (1, 2, 3)
        child = subprocess.Popen(
            [sys.executable, "-c", UPLOADER, str(local), remote.path,
             "pause" if at_move else "run"],
            env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True)
        try:
            if not upload_s:  # how long one upload takes here: the kills land within one
                upload_s = float(next_line(child, "DONE "))
            if at_move:
                next_line(child, "MOVING")
            else:
                next_line(child, "PUT")
                time.sleep(rng.uniform(0.0, upload_s))
        finally:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait(timeout=30)
        names = [i.base_name for i in remote.fs.get_file_info(pyarrow.fs.FileSelector(folder))]
        fetched = tmp_path / f"fetched-{kill}.db"
        assert remote.download_checked(fetched), "the copy vanished"
        facts = log_facts(fetched, check_pages=True)  # a whole, readable log
        seen.append({"at_move": at_move, "events": facts.progress.events,
                     "bytes": fetched.stat().st_size,
                     "unfinished_upload_left": any(".uploading-" in n for n in names)})
    # The next driver clears what killed uploads left, before it uploads anything, and its
    # upload brings the copy up to the local log.
    upload(local, remote)
    names = [i.base_name for i in remote.fs.get_file_info(pyarrow.fs.FileSelector(folder))]
    assert sorted(names) == ["statemachine.db", "statemachine.db.manifest.json"], names
    assert all(s["unfinished_upload_left"] for s in seen if s["at_move"]), seen
    with EventStore.open(local, create=False) as store:
        local_events = Counter(e.event_id for e in store.read_experiment("exp"))
    final = tmp_path / "final.db"
    assert remote.download_checked(final)

    def found(log: LogCount) -> dict[str, Counter[Any]]:
        return {"events": Counter(r.event_id for r in log.rows)}

    check_log(
        f"sqlite:///{final}", "exp", scenario="Uploader SIGKILLed mid-upload",
        injected=f"kill -9 of a process uploading its log to S3, at a random moment of an "
                 f"upload ({upload_s:.2f} s each; seed {seed}; 3 in a row just before the "
                 f"new copy's move over the old); then the next driver's upload",
        times=len(seen), expected={"events": local_events}, found=found,
        reliability=reliability,
        details={"seed": seed, "kills": seen, "unfinished_uploads_left": sum(
            s["unfinished_upload_left"] for s in seen)},
    )


# ------------------------------------------------------------------ issue 23, item 1: Tune


@pytest.fixture(scope="module")
def ray_on_s3(s3_server: S3Server) -> Iterator[S3Server]:
    """A real Ray whose workers (and this driver) reach the S3 server; shut down at the end."""
    saved = {name: os.environ.get(name) for name in s3_server.env}
    os.environ.update(s3_server.env)
    try:
        with running_ray(worker_pythonpath()):
            yield s3_server
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def copy_on_storage(s3: S3Server, folder: str, scratch: Path) -> tuple[Path, set[str], list[int]]:
    """The log copy in an ``s3://`` experiment folder: downloaded (checked), its trial ids
    and its driver sessions' epochs."""
    remote = RemoteFile(s3.filesystem(), f"{folder.removeprefix('s3://')}/statemachine.db")
    local = scratch / f"{uuid.uuid4().hex}.db"
    assert remote.download_checked(local), f"no log copy in {folder}"
    with EventStore.open(local, create=False) as store:
        trials = set(store.list_trials("exp"))
        epochs = [s.epoch for s in store.list_sessions("exp")]
    return local, trials, epochs


@pytest.mark.ray
@pytest.mark.slow
def test_same_named_experiments_stored_in_two_places_keep_their_logs_apart(
    ray_on_s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's scenario on one machine: ``exp`` on bucket A (its trial fails once), then
    another ``exp`` on bucket B, then ``Tuner.restore`` of A's. Each keeps its own local log
    and its own copy; the restore continues A's log, adopting nothing from Ray."""
    from ray import tune

    from statemachine.tune import CheckpointConfig, EventLogCallback, FailureConfig, RunConfig
    from tests.faults.fault_trainables import Steps

    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # this machine's ~/ray_results
    monkeypatch.delenv("STATEMACHINE_DB_URL", raising=False)
    storage = {}
    for side in ("a", "b"):
        bucket = f"{side}-{uuid.uuid4().hex[:10]}"
        ray_on_s3.make_bucket(bucket)
        storage[side] = f"s3://{bucket}/exps"
        (tmp_path / f"ctl-{side}").mkdir()

    def run_config(side: str) -> Any:
        return RunConfig(name="exp", storage_path=storage[side], verbose=0,
                         callbacks=[EventLogCallback()],
                         failure_config=FailureConfig(max_failures=0),
                         checkpoint_config=CheckpointConfig(checkpoint_frequency=1))

    def space(side: str, fail_at: list[int]) -> dict[str, Any]:
        return {"ctl": str(tmp_path / f"ctl-{side}"), "iters": 3, "sleep": 0.0,
                "fail_at": fail_at}

    first = tune.Tuner(Steps, param_space=space("a", [2]), run_config=run_config("a")).fit()
    assert [t.status for t in first._experiment_analysis.trials] == ["ERROR"]
    tune.Tuner(Steps, param_space=space("b", []), run_config=run_config("b")).fit()
    with captured() as messages:
        restored = tune.Tuner.restore(f"{storage['a']}/exp", trainable=Steps,
                                      resume_errored=True).fit()
    (trial,) = restored._experiment_analysis.trials
    assert (trial.status, trial.num_failures) == ("TERMINATED", 1)

    a_copy, a_trials, a_epochs = copy_on_storage(ray_on_s3, f"{storage['a']}/exp", tmp_path)
    b_copy, b_trials, b_epochs = copy_on_storage(ray_on_s3, f"{storage['b']}/exp", tmp_path)
    assert a_trials == {trial.trial_id} and a_epochs == [1, 2], (a_trials, a_epochs)
    assert len(b_trials) == 1 and not b_trials & a_trials and b_epochs == [1]
    assert not [m for m in messages if "adopted" in m], messages
    with EventStore.open(a_copy, create=False) as store:
        assert verify(store, "exp").ok
        failures = [e for e in store.read_trial("exp", trial.trial_id)
                    if e.type_name == "TrialFailed"]
        assert [e.epoch for e in failures] == [1]
    logs = sorted((tmp_path / "home" / "ray_results" / "exp").glob("*/statemachine.db"))
    assert len(logs) == 2, logs  # one local log per storage location
    assert {log_facts(p).identity("exp").log_id for p in logs} == {  # type: ignore[union-attr]
        log_facts(c).identity("exp").log_id for c in (a_copy, b_copy)}  # type: ignore[union-attr]
