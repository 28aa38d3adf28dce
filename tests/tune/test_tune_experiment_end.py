"""Every way an experiment ends leaves the log agreeing with Ray for every trial (issue 15).

``fail_fast=True``, ``fail_fast="raise"``, a stopper, a time budget, in this process (module
Ray fixture); SIGINT of the driver in its own process. A ``Witness`` callback after the event
log's writes Ray's final status of every trial; the replayed log must say the same, with no
event refused and no hook error.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tune_trainables import Witness, slow_or_failing

from tests.tune.tunekit import HERE, replay, worker_pythonpath

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def run(tmp_path: Path, *, fail_fast: bool | str = False, stop: Any = None,
        time_budget_s: float | None = None, fail_first: bool = False,
        ) -> tuple[Any, Path, BaseException | None]:
    """Four trials on 2 CPUs (two wait their turn); the first fails at once if asked.

    Returns the callback, Ray's final statuses (a file) and what ``Tuner.fit()`` raised
    (only ``fail_fast="raise"`` may raise).
    """
    from ray import tune

    from statemachine.tune import EventLogCallback, FailureConfig, RunConfig

    witness = tmp_path / "ray.json"
    callback = EventLogCallback()
    tuner = tune.Tuner(
        slow_or_failing,
        param_space={"fail": tune.grid_search([fail_first, False, False, False]),
                     "sleep": 1.0, "iters": 20},
        tune_config=tune.TuneConfig(time_budget_s=time_budget_s),
        run_config=RunConfig(name="end", storage_path=str(tmp_path / "results"), stop=stop,
                             callbacks=[callback, Witness(str(witness))], verbose=0,
                             failure_config=FailureConfig(fail_fast=fail_fast)),
    )
    raised: BaseException | None = None
    try:
        tuner.fit()
    except Exception as exc:
        if fail_fast != "raise":
            raise
        raised = exc
    assert callback.summary()["hook_errors"] == 0
    assert callback.events_rejected == 0
    return callback, witness, raised


def assert_log_agrees(tmp_path: Path, witness: Path) -> dict[str, str]:
    from statemachine.log import EventStore, verify

    ray_status = json.loads(witness.read_text())
    url = f"sqlite:///{tmp_path / 'results' / 'end' / 'statemachine.db'}"
    logged = {tid: s.status.value for tid, s in replay(url, "end").items()}
    assert logged == ray_status
    with EventStore.open(url, create=False) as store:
        assert verify(store, "end").ok
    return ray_status


@pytest.mark.parametrize("fail_fast", [True, "raise"])
def test_fail_fast(ray_cluster: None, tmp_path: Path, fail_fast: bool | str) -> None:
    _, witness, raised = run(tmp_path, fail_fast=fail_fast, fail_first=True)
    statuses = assert_log_agrees(tmp_path, witness)
    if fail_fast == "raise":  # the trial's error reaches the caller of Tuner.fit()
        assert raised is not None and "this trial fails at once" in str(raised)
    else:  # the failed trial is ERROR, fail_fast stopped the others
        assert raised is None
        assert {"ERROR", "TERMINATED"} <= set(statuses.values())


def test_a_stopper_ends_the_experiment(ray_cluster: None, tmp_path: Path) -> None:
    from ray.tune.stopper import Stopper

    class StopAtFirstResult(Stopper):
        def __init__(self) -> None:
            self.seen = False

        def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
            self.seen = True
            return False

        def stop_all(self) -> bool:
            return self.seen

    _, witness, _ = run(tmp_path, stop=StopAtFirstResult())
    statuses = assert_log_agrees(tmp_path, witness)
    assert set(statuses.values()) == {"TERMINATED"}


def test_a_time_budget_ends_the_experiment(ray_cluster: None, tmp_path: Path) -> None:
    _, witness, _ = run(tmp_path, time_budget_s=4.0)
    statuses = assert_log_agrees(tmp_path, witness)
    assert set(statuses.values()) == {"TERMINATED"}


DRIVER = HERE / "end_driver.py"


def test_sigint_of_the_driver(tmp_path: Path) -> None:
    """Ctrl+C: Tune stops gracefully; trials it leaves PENDING stay PENDING in the log too."""
    env = {**os.environ, "PYTHONPATH": worker_pythonpath()}
    proc = subprocess.Popen([sys.executable, str(DRIVER), str(tmp_path)], env=env,
                            cwd=str(HERE), start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        started = tmp_path / "results" / "end" / "statemachine.db"
        while not started.exists() and time.monotonic() < deadline:
            assert proc.poll() is None, "the driver ended before it was interrupted"
            time.sleep(0.5)
        time.sleep(3.0)  # a few results in
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (summary["hook_errors"], summary["rejected"]) == (0, 0)
    assert_log_agrees(tmp_path, tmp_path / "ray.json")
