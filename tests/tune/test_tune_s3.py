"""A driver that comes back on another machine keeps its budgets: the log on S3 storage.

The driver-crash scenario of test_tune_driver_crash.py (TUNE_RESTORE_RETRY_NUM=2, the driver
SIGKILLed while restore attempt 3 hangs) with ``storage_path="s3://bucket/..."`` on a real S3
API (moto's server on 127.0.0.1), no log URL given: the log is a local SQLite file that
follows the experiment to the bucket. After the kill EVERY local folder of the first driver
is deleted (its home with ``~/ray_results``, its working folder, its temporary folder with
Ray's session): a new head node. ``Tuner.restore("s3://bucket/...")`` from a fresh working
folder must count the budgets exactly as the local scenario does, and ``trial-replay --db
s3://...`` reads the log from the bucket.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from statemachine.cli import cli
from statemachine.log import EventStore
from statemachine.log.remote import RemoteFile
from tests.s3_server import S3Server
from tests.tune.test_tune_driver_crash import EXPECTED_FAILURES, Driver, R, run_scenario

pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture
def nodes() -> Iterator[Path]:
    """A short folder for the two "machines" (Ray's socket paths must stay under 108 bytes)."""
    folder = Path(tempfile.mkdtemp(prefix="smnode-", dir="/tmp"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def machine(root: Path, s3: S3Server) -> Driver:
    """A driver whose every local folder (home, working folder, temporary files) is in root."""
    for part in ("home", "work", "tmp"):
        (root / part).mkdir(parents=True, exist_ok=True)
    return Driver(
        env={**s3.env, "HOME": str(root / "home"), "TMPDIR": str(root / "tmp"),
             "RAY_TMPDIR": str(root / "tmp")},
        cwd=root / "work",
    )


def failures_in_bucket(s3: S3Server, path: str, scratch: Path) -> list[tuple[str, str, int]]:
    """The failures the log in the bucket holds (downloaded to ``scratch``)."""
    local = scratch / f"peek-{uuid.uuid4().hex}.db"
    if not RemoteFile(s3.filesystem(), path).download(local):
        return []
    store = EventStore.open(local, create=False)
    try:
        return [
            (e.event.error.kind, e.decision, e.epoch)
            for trial in store.list_trials("crash")
            for e in store.read_trial("crash", trial)
            if e.type_name == "TrialFailed"
        ]
    finally:
        store.close()
        local.unlink()


def test_a_new_head_node_restores_from_s3_with_the_budgets(
    s3_env: S3Server, tmp_path: Path, nodes: Path
) -> None:
    s3 = s3_env
    bucket = f"runs-{uuid.uuid4().hex[:8]}"
    s3.make_bucket(bucket)
    storage = f"s3://{bucket}/exps"
    log_path = f"{bucket}/exps/crash/statemachine.db"
    first, second = nodes / "node1", nodes / "node2"
    seen_before_kill: list[tuple[str, str, int]] = []
    upload_wait: list[float] = []

    def log_in_bucket_has_the_spent_retries() -> None:
        # The upload runs in the background after each decision: wait until the bucket's
        # copy holds the two restore retries, as a head node lost now would leave it.
        started = deadline = time.monotonic()
        deadline += 30
        while time.monotonic() < deadline:
            seen_before_kill[:] = failures_in_bucket(s3, log_path, tmp_path)
            if seen_before_kill == EXPECTED_FAILURES[:3]:
                upload_wait.append(time.monotonic() - started)
                return
            time.sleep(0.2)
        raise AssertionError(f"the bucket's log never held the retries: {seen_before_kill}")

    def lose_the_head_node() -> None:
        # Keyed by where the experiment is stored: ray_results/<name>/s3-<key>/
        (local_log,) = (first / "home" / "ray_results" / "crash").glob("s3-*/statemachine.db")
        assert local_log.exists(), "the first driver's log was not where expected"
        shutil.rmtree(first)

    scenario = run_scenario(
        tmp_path, "1", storage=storage,
        first=machine(first, s3), second=machine(second, s3),
        before_kill=log_in_bucket_has_the_spent_retries, after_kill=lose_the_head_node,
    )

    assert not first.exists()
    assert scenario.before == R + 1
    # Exactly as in the local driver-crash test: the first restore failure after the restart
    # counts (failure 2 of max_failures=2), the second ends the trial.
    assert scenario.after == 2, scenario.log.read_text()[-3000:]
    ((status, num_failures),) = scenario.result.values()
    assert (status, num_failures) == ("ERROR", 3)
    output = scenario.log.read_text()
    assert f"no local event log: using the copy downloaded from s3://{log_path}" in output
    assert f"a copy follows the experiment to s3://{log_path}" in output

    # The bucket holds the whole log, with no temporary upload left beside it.
    assert failures_in_bucket(s3, log_path, tmp_path) == EXPECTED_FAILURES
    import pyarrow.fs

    names = [i.base_name for i in s3.filesystem().get_file_info(
        pyarrow.fs.FileSelector(f"{bucket}/exps/crash"))]
    assert "statemachine.db" in names and not [n for n in names if "uploading" in n]

    # trial-replay reads it from the bucket (downloaded to a temporary file, read-only).
    runner = CliRunner()
    db = f"s3://{bucket}/exps/crash"
    listed = runner.invoke(cli, ["--db", db, "trials", "crash", "--json"])
    assert listed.exit_code == 0, listed.output
    ((trial_id, _),) = scenario.result.items()
    (row,) = json.loads(listed.stdout)
    assert (row["trial_id"], row["status"], row["num_failures"]) == (trial_id, "ERROR", 3)
    shown = runner.invoke(cli, ["--db", db, "show", "crash", trial_id, "--json"])
    assert shown.exit_code == 0, shown.output
    assert [(r["error_type"], r["decision"], r["epoch"]) for r in json.loads(shown.stdout)["events"]
            if r["event"] == "TrialFailed"] == EXPECTED_FAILURES
    print(f"S3 scenario: restore attempts before the kill {scenario.before}, after restore "
          f"{scenario.after}; the bucket's copy held the retries "
          f"{upload_wait[0]:.2f} s after restore attempt {R + 1} began (+0.5 s idle)")


def test_trial_replay_names_a_missing_log_on_storage(s3_env: S3Server) -> None:
    bucket = f"empty-{uuid.uuid4().hex[:8]}"
    s3_env.make_bucket(bucket)
    result = CliRunner().invoke(cli, ["--db", f"s3://{bucket}/exps/nothing", "experiments"])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"trial-replay: error: no event log at s3://{bucket}/exps/nothing/statemachine.db "
        "(check the experiment's storage URI)"
    )
