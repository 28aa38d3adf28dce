"""Driver crash: a restore budget spent before a SIGKILL stays spent after ``Tuner.restore``.

With ``TUNE_RESTORE_RETRY_NUM=R`` a trial's restores fail; the driver is SIGKILLed while
restore attempt R+1 hangs (R failures already handled). A new driver process continues with
``Tuner.restore``, every restore failing, ``max_failures=2`` (one failure already spent by a
training error). With the callback the next restore failure counts at once; plain Ray (the
same scenario without the callback) grants R new retries first. Both are measured.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tune_trainables import restore_attempts

from tests.tune.tunekit import HERE, replay, stored_events, worker_pythonpath

pytestmark = [pytest.mark.ray, pytest.mark.slow]

R = 2
DRIVER = HERE / "tune_crash_driver.py"


def start_driver(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    """A driver in its own session, so the test can kill it and Ray's helpers together."""
    # TUNE_GLOBAL_CHECKPOINT_S=0: Ray snapshots the experiment every step, so at the kill its
    # state holds the checkpoint and num_failures, and the measured difference between the two
    # scenarios is the restore counter alone (with the default period Ray's snapshot may even
    # predate the checkpoint, and the trial would restart from scratch).
    env = {**os.environ, "PYTHONPATH": worker_pythonpath(), "TUNE_RESTORE_RETRY_NUM": str(R),
           "TUNE_GLOBAL_CHECKPOINT_S": "0", "RAY_DEDUP_LOGS": "0"}
    env.pop("STATEMACHINE_DB_URL", None)
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, str(DRIVER), *args], stdout=out,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the driver's process group (Ray's helper processes linger otherwise)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def run_scenario(tmp: Path, with_callback: bool) -> tuple[int, int, dict[str, list], Path]:
    """Returns (restore attempts before the kill, attempts after restore, Ray's result)."""
    ctl = tmp / "ctl"
    ctl.mkdir(parents=True)
    (ctl / "fail-restores").write_text("-1")
    (ctl / "block-restore-after").write_text(str(R))
    storage, name, out = tmp / "results", "crash", tmp / "result.json"
    log = tmp / "driver.log"
    flag = "1" if with_callback else "0"
    args = [str(storage), name, str(ctl), flag, str(out)]

    first = start_driver(["fit", *args], log)
    try:
        deadline = time.monotonic() + 180
        while restore_attempts(ctl) < R + 1:
            assert first.poll() is None, f"driver ended early:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no restore attempt {R + 1}:\n{log.read_text()}"
            time.sleep(0.2)
        time.sleep(0.5)  # the driver is idle now, waiting on the hanging restore
    finally:
        kill_group(first)
    before = restore_attempts(ctl)
    (ctl / "block-restore-after").unlink()

    second = start_driver(["restore", *args], log)
    try:
        second.wait(timeout=240)
    finally:
        kill_group(second)
    assert out.exists(), f"restore driver wrote no result:\n{log.read_text()[-4000:]}"
    return before, restore_attempts(ctl) - before, json.loads(out.read_text()), storage / name


def test_restore_budget_survives_a_driver_crash(tmp_path: Path) -> None:
    before, after, result, experiment = run_scenario(tmp_path / "with", with_callback=True)
    plain_before, plain_after, plain_result, _ = run_scenario(tmp_path / "plain", False)

    # Both drivers were killed while restore attempt R+1 hung, after R failed ones.
    assert before == plain_before == R + 1
    # After the restart, with the log: the first restore failure counts (failure 2 of
    # max_failures=2, recover), the second ends the trial: 2 attempts.
    assert after == 2
    # Plain Ray forgot the R retries it had spent: R more attempts before the same end.
    assert plain_after == after + R
    ((status, num_failures),) = result.values()
    assert (status, num_failures) == ("ERROR", 3)
    assert list(plain_result.values()) == [["ERROR", 3]]

    url = f"sqlite:///{experiment / 'statemachine.db'}"
    states = replay(url, "crash")
    assert {tid: [s.status.value, s.failures] for tid, s in states.items()} == result
    (trial_id,) = result
    rows = [e for e in stored_events(url, "crash", trial_id) if e.type_name == "TrialFailed"]
    assert [(e.event.error.kind, e.decision, e.epoch) for e in rows] == [
        ("TrainingError", "RECOVER", 1),
        ("RestoreError", "RETRY_RESTORE", 1),
        ("RestoreError", "RETRY_RESTORE", 1),
        ("RestoreError", "RECOVER", 2),
        ("RestoreError", "GIVE_UP", 2),
    ]
