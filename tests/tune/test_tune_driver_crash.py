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
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tune_trainables import load_attempts, restore_attempts

from tests.tune.tunekit import HERE, kill_group, replay, stored_events, worker_pythonpath

pytestmark = [pytest.mark.ray, pytest.mark.slow]

R = 2
DRIVER = HERE / "tune_crash_driver.py"


@dataclass
class Driver:
    """How a driver process of the scenario runs: its environment and working folder."""

    env: dict[str, str] = field(default_factory=dict)
    """Variables added to (or, when empty strings, removed from) the test's environment."""
    cwd: Path | None = None


def start_driver(args: list[str], log: Path, how: Driver | None = None
                 ) -> subprocess.Popen[bytes]:
    """A driver in its own session, so the test can kill it and Ray's helpers together."""
    # TUNE_GLOBAL_CHECKPOINT_S=0: Ray snapshots the experiment every step, so at the kill its
    # state holds the checkpoint and num_failures, and the measured difference between the two
    # scenarios is the restore counter alone (with the default period Ray's snapshot may even
    # predate the checkpoint, and the trial would restart from scratch).
    how = how or Driver()
    env = {**os.environ, "PYTHONPATH": worker_pythonpath(), "TUNE_RESTORE_RETRY_NUM": str(R),
           "TUNE_GLOBAL_CHECKPOINT_S": "0", "RAY_DEDUP_LOGS": "0"}
    env.pop("STATEMACHINE_DB_URL", None)
    env.update(how.env)
    env = {k: v for k, v in env.items() if v != ""}
    if how.cwd is not None:
        how.cwd.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, str(DRIVER), *args], stdout=out,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                cwd=how.cwd)


@dataclass
class Scenario:
    """What one run of the scenario measured."""

    before: int
    """Restore attempts before the kill."""
    after: int
    """Restore attempts after ``Tuner.restore``."""
    result: dict[str, list[Any]]
    """``{trial_id: [status, num_failures]}`` from the restored run's ``ResultGrid``."""
    log: Path
    """Both drivers' output."""

    def __str__(self) -> str:
        """What a failed assertion on the scenario shows: the counts and both drivers' output
        (the second driver's decisions are in its last lines)."""
        return (f"restore attempts before the kill {self.before}, after it {self.after}, "
                f"result {self.result}; the drivers' output ends:\n"
                f"{self.log.read_text(errors='replace')[-6000:]}")


def run_scenario(tmp: Path, callback: str, *, storage: str | None = None,
                 first: Driver | None = None, second: Driver | None = None,
                 before_kill: Callable[[], None] | None = None,
                 after_kill: Callable[[], None] | None = None,
                 function: bool = False) -> Scenario:
    """Fit, SIGKILL the driver while restore attempt R+1 hangs, ``Tuner.restore``.

    ``callback``: ``0`` (plain Ray), ``1`` (``EventLogCallback()``) or a log URL.
    ``storage``: the experiment's ``storage_path`` (default: a folder in ``tmp``).
    ``before_kill``: waits for whatever must be true when the driver is killed (it has
    asserted R+1 restore attempts); ``after_kill``: runs between the two drivers.
    ``function``: the trial is a function trainable whose own checkpoint loads (inside
    ``restoring()``) all fail; the driver is killed while load 2 hangs, after load 1 failed.
    """
    ctl = tmp / "ctl"
    ctl.mkdir(parents=True)
    (ctl / "fail-restores").write_text("-1")
    (ctl / "block-restore-after").write_text(str(R))
    attempts, blocked, block = restore_attempts, R + 1, ctl / "block-restore-after"
    if function:
        (ctl / "block-load-after").write_text("1")
        attempts, blocked, block = (lambda c: load_attempts(c, "t")), 2, ctl / "block-load-after"
        env = {"CRASH_TRAINABLE": "function"}
        first = Driver({**env, **(first.env if first else {})}, first.cwd if first else None)
        second = Driver({**env, **(second.env if second else {})}, second.cwd if second else None)
    storage = storage or str(tmp / "results")
    name, out, log = "crash", tmp / "result.json", tmp / "driver.log"
    args = [storage, name, str(ctl), callback, str(out)]

    driver = start_driver(["fit", *args], log, first)
    try:
        deadline = time.monotonic() + 180
        while attempts(ctl) < blocked:
            assert driver.poll() is None, f"driver ended early:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no restore attempt {blocked}:\n{log.read_text()}"
            time.sleep(0.2)
        time.sleep(0.5)  # the driver is idle now, waiting on the hanging restore
        if before_kill is not None:
            before_kill()
    finally:
        kill_group(driver)
    before = attempts(ctl)
    block.unlink()
    if after_kill is not None:
        after_kill()

    driver = start_driver(["restore", *args], log, second)
    try:
        driver.wait(timeout=240)
    finally:
        kill_group(driver)
    assert out.exists(), f"restore driver wrote no result:\n{log.read_text()[-4000:]}"
    return Scenario(before, attempts(ctl) - before, json.loads(out.read_text()), log)


#: The failures of the scenario's trial as the log records them, with the callback.
EXPECTED_FAILURES = [
    ("TrainingError", "RECOVER", 1),
    ("RestoreError", "RETRY_RESTORE", 1),
    ("RestoreError", "RETRY_RESTORE", 1),
    ("RestoreError", "RECOVER", 2),
    ("RestoreError", "GIVE_UP", 2),
]


def test_restore_budget_survives_a_driver_crash(tmp_path: Path) -> None:
    with_log = run_scenario(tmp_path / "with", "1")
    plain = run_scenario(tmp_path / "plain", "0")
    before, after, result = with_log.before, with_log.after, with_log.result
    plain_before, plain_after, plain_result = plain.before, plain.after, plain.result
    experiment = tmp_path / "with" / "results" / "crash"

    # Both drivers were killed while restore attempt R+1 hung, after R failed ones.
    assert before == plain_before == R + 1, f"{with_log}\n{plain}"
    # After the restart, with the log: the first restore failure counts (failure 2 of
    # max_failures=2, recover), the second ends the trial: 2 attempts.
    assert after == 2, with_log
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
    assert [(e.event.error.kind, e.decision, e.epoch) for e in rows] == EXPECTED_FAILURES


def test_a_function_trainables_restore_count_survives_a_driver_crash(tmp_path: Path) -> None:
    """Killed between two failures of the user's own checkpoint load (``restoring()``)."""
    scenario = run_scenario(tmp_path, "1", function=True)
    # Load 1 failed (restore retry 1), load 2 hung at the kill.
    assert scenario.before == 2
    # The count holds: load 2 is retry 2 of R=2, load 3 spends a failure (2 of
    # max_failures=2, recover), load 4 ends the trial. A lost count would take 4 loads.
    assert scenario.after == 3
    assert list(scenario.result.values()) == [["ERROR", 3]]
    url = f"sqlite:///{tmp_path / 'results' / 'crash' / 'statemachine.db'}"
    (trial_id,) = scenario.result
    rows = [e for e in stored_events(url, "crash", trial_id) if e.type_name == "TrialFailed"]
    assert [(e.event.error.kind, e.decision, e.epoch) for e in rows] == [
        ("TrainingError", "RECOVER", 1),
        ("RestoreError", "RETRY_RESTORE", 1),
        ("RestoreError", "RETRY_RESTORE", 2),  # the second driver: retry 2 of 2
        ("RestoreError", "RECOVER", 2),
        ("RestoreError", "GIVE_UP", 2),
    ]
    assert all(e.event.error.cause_type == "builtins.OSError" for e in rows[1:])
