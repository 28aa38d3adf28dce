"""The real Ray runs the ingest tests read, made WITHOUT the callback (shared by the tests and
``tests/data/make_ingest_fixtures.py``).

- :func:`run_faults` (in this process, on the caller's ``ray.init``): one ``Tuner.fit`` of the
  class trainable ``Faulty`` with ``max_failures=1`` and ``TUNE_RESTORE_RETRY_NUM=2``, four
  trials: ``recovered`` (a training failure, then completes); ``errored`` (two training
  failures: ERROR); ``restore`` (a training failure, then its ``load_checkpoint`` fails three
  times: two retries Ray does not count, the third counts, past ``max_failures``: ERROR);
  ``died`` (its process exits at iteration 3: an actor death, recovered).
- :func:`run_crash` (driver processes of their own, joining the caller's Ray cluster): the
  function trainable ``resumable`` under ``max_failures=0``; trial ``e`` fails and ends ERROR,
  the driver is SIGKILLed while trial ``s`` runs, then ``Tuner.restore(...,
  resume_errored=True)`` finishes both.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
DRIVER = HERE / "ingest_driver.py"
RESTORE_RETRIES = 2


def worker_pythonpath() -> str:
    """Lets Ray's workers (and the drivers) import the package and these trainables."""
    parts = [str(REPO), str(HERE), os.environ.get("PYTHONPATH", "")]
    return os.pathsep.join(p for p in parts if p)


def ray_view(grid: Any) -> dict[str, list[Any]]:
    """``{trial_id: [status, num_failures]}``: Ray's own view of a finished ``ResultGrid``."""
    return {t.trial_id: [t.status, t.run_metadata.num_failures]
            for t in grid._experiment_analysis.trials}


#: The cases of :func:`run_faults`, one trial each (``max_failures=1``).
FAULT_CASES = [
    {"tag": "recovered", "fail_at": [3]},
    {"tag": "errored", "fail_at": [2, 4]},
    {"tag": "restore", "fail_at": [3], "fail_restores": RESTORE_RETRIES + 1},
    {"tag": "died", "die_at": 3},
]


def run_faults(storage: Path, ctl: Path, name: str = "faults") -> dict[str, list[Any]]:
    """Fit the faults experiment into ``storage/name``; Ray's view of it."""
    from ingest_trainables import Faulty
    from ray import tune

    from statemachine.tune import CheckpointConfig, FailureConfig, RunConfig

    ctl.mkdir(parents=True, exist_ok=True)
    space = {"ctl": str(ctl), "iters": 5, "case": tune.grid_search(FAULT_CASES)}
    saved = os.environ.get("TUNE_RESTORE_RETRY_NUM")
    os.environ["TUNE_RESTORE_RETRY_NUM"] = str(RESTORE_RETRIES)  # read by Ray's driver
    try:
        tuner = tune.Tuner(Faulty, param_space=space, run_config=RunConfig(
            name=name, storage_path=str(storage), verbose=0,
            failure_config=FailureConfig(max_failures=1),
            checkpoint_config=CheckpointConfig(checkpoint_frequency=2)))
        grid = tuner.fit()
    finally:
        if saved is None:
            os.environ.pop("TUNE_RESTORE_RETRY_NUM", None)
        else:
            os.environ["TUNE_RESTORE_RETRY_NUM"] = saved
    return ray_view(grid)


@dataclass
class CrashRun:
    """The crash experiment: its folder, Ray's final view, and how long each driver took."""

    folder: Path
    ray_view: dict[str, list[Any]]
    seconds: float


def _driver(mode: str, args: list[str], log: Path) -> subprocess.Popen[bytes]:
    # TUNE_GLOBAL_CHECKPOINT_S=0: Ray saves its experiment state at every step, so at the kill
    # it holds trial e ERROR and Tuner.restore(resume_errored=True) runs it again.
    env = {**os.environ, "PYTHONPATH": worker_pythonpath(), "TUNE_GLOBAL_CHECKPOINT_S": "0",
           "RAY_DEDUP_LOGS": "0"}
    env.pop("STATEMACHINE_DB_URL", None)
    env.pop("TUNE_RESTORE_RETRY_NUM", None)
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, str(DRIVER), mode, *args], stdout=out,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and the Ray processes it started
    except ProcessLookupError:
        pass
    proc.wait(timeout=60)


def _errored_on_storage(folder: Path) -> bool:
    """Whether Ray's saved state has trial ``e`` ERROR *and* its ``error.txt`` reached the
    experiment folder: Ray writes error.txt in its staging folder and copies it to storage
    on its own schedule, so the state can say ERROR before the failure is there (a kill
    then leaves no trace of it: tested apart, with the committed folders)."""
    for path in folder.glob("experiment_state-*.json"):
        try:
            document = json.loads(path.read_text())
            trials = [json.loads(t) for t, _ in document["trial_data"]]
        except (ValueError, OSError, KeyError, TypeError):
            continue  # being written
        for trial in trials:
            if trial["config"]["case"]["tag"] == "e" and trial["status"] == "ERROR":
                return (folder / trial["relative_logdir"] / "error.txt").exists()
    return False


def run_crash(base: Path, between: Callable[[Path], None] | None = None,
              name: str = "crash") -> CrashRun:
    """Fit, SIGKILL the driver once trial ``e`` is ERROR in Ray's state (its error.txt in the
    folder) and ``s`` has reported 4 results, run ``between(folder)``, then
    ``Tuner.restore(resume_errored=True)``.

    The drivers join this process's Ray cluster (``ray.init`` first): killing one ends its
    job, whose trial actors Ray then stops, and no driver pays for a cluster of its own.
    """
    import ray

    ctl, results, log, out = base / "ctl", base / "results", base / "driver.log", base / "out.json"
    ctl.mkdir(parents=True)
    args = [ray.get_runtime_context().gcs_address, str(results), name, str(ctl), str(out)]
    folder = results / name
    started = time.monotonic()
    driver = _driver("fit", args, log)
    try:
        deadline = time.monotonic() + 180
        while not ((ctl / "s-4").exists() and _errored_on_storage(folder)):
            assert driver.poll() is None, f"the driver ended early:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no kill point reached:\n{log.read_text()}"
            time.sleep(0.1)
    finally:
        _kill(driver)
    if between is not None:
        between(folder)
    driver = _driver("restore", args, log)
    try:
        driver.wait(timeout=240)
    finally:
        _kill(driver)
    assert out.exists(), f"the restore driver wrote no result:\n{log.read_text()[-4000:]}"
    return CrashRun(folder, json.loads(out.read_text()), time.monotonic() - started)


def copy_folder(source: Path, target: Path) -> Path:
    """A copy of a Ray experiment folder (as a test reads it at one moment)."""
    shutil.copytree(source, target)
    return target
