"""Ray's own Tune examples (``ray.tune.examples``, ``--smoke-test``), as users' drivers, with
the event log and seeded random training failures (issue 15).

One driver process (``examples_driver.py``, Ray with 2 CPUs) runs the selection: PBT with the
class and the function API, HyperBand, ASHA, custom checkpointing (function and class with a
callback); those needing no extra heavy dependency. Every ``TuneController`` gets an
``EventLogCallback``; every trainable fails at random (``examples_hook.py``, seeded). After
each example: no hook error, no event refused or unwritten, the log's final status of every
trial equals Ray's, and ``verify`` passes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.tune.tunekit import HERE, replay, worker_pythonpath

pytestmark = [pytest.mark.ray, pytest.mark.slow]

EXAMPLES = [
    "pbt_example",  # PBT, class API
    "pbt_function",  # PBT, function API (fail_fast=True)
    "hyperband_example",  # HyperBand, class API (fail_fast=True)
    "async_hyperband_example:reuse",  # ASHA (20 one-iteration trials: actors reused)
    "custom_func_checkpointing",  # function API checkpoints
    "custom_checkpointing_with_callback",  # class API checkpoints steered by a callback
]
SEED = "15"
#: On the oldest supported Ray (CI's second run) only the quickest two run: the full set is
#: a few minutes on 2 cores, and CI runs every Tune suite on both Rays.
QUICK = ["pbt_function", "custom_func_checkpointing"]


def selected() -> list[str]:
    """The examples this Ray runs."""
    import ray

    from statemachine.tune.compat import TESTED_RAY

    return QUICK if ray.__version__ == TESTED_RAY[0] else EXAMPLES


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run every example once (one driver process); the folder of their reports."""
    folder = tmp_path_factory.mktemp("examples")
    env = {**os.environ, "PYTHONPATH": worker_pythonpath(), "HOME": str(folder / "home")}
    env.pop("STATEMACHINE_DB_URL", None)
    done = subprocess.run(
        [sys.executable, str(HERE / "examples_driver.py"), str(folder / "out"), SEED,
         *selected()],
        env=env, cwd=str(HERE), capture_output=True, text=True, timeout=900,
    )
    (folder / "driver.log").write_text(done.stdout + done.stderr)
    assert done.returncode == 0, done.stderr[-3000:]
    return folder / "out"


def test_failures_were_injected(reports: Path) -> None:
    # Seeded failures: at least one per example run (three or more over the full selection).
    expected = 3 if len(selected()) == len(EXAMPLES) else len(selected())
    assert len(list((reports / "failed").iterdir())) >= expected


@pytest.mark.parametrize("example", EXAMPLES)
def test_the_log_agrees_with_ray(reports: Path, example: str) -> None:
    from statemachine.log import EventStore, verify

    if example not in selected():
        pytest.skip(f"{example}: only {', '.join(QUICK)} run on the oldest supported Ray")
    name = example.partition(":")[0]
    report: dict[str, Any] = json.loads((reports / f"{name}.json").read_text())
    runs = report["runs"]
    assert runs, f"{example} built no TuneController ({report['error']})"
    for run in runs:
        summary = run["summary"]
        assert (summary["hook_errors"], summary["rejected"], summary["unwritten"]) == (0, 0, 0)
        assert run["ray"] is not None, "the experiment never ended"
        url = run["url"]
        logged = {tid: s.status.value for tid, s in replay(url, run["experiment"]).items()}
        # Two examples may share an experiment name (so one folder and one log): each run's
        # own trials are compared.
        assert {tid: logged.get(tid) for tid in run["ray"]} == run["ray"]
        with EventStore.open(url, create=False) as store:
            assert verify(store, run["experiment"]).ok
