"""Ray Train inside Tune: ``restoring()`` in a ``DataParallelTrainer``'s loop makes its failed
checkpoint loads restore retries (real Ray, CPU only, in its own driver process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tune.tunekit import HERE, replay, stored_events, worker_pythonpath

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_restoring_inside_a_ray_train_loop(tmp_path: Path) -> None:
    ctl, out, log = tmp_path / "ctl", tmp_path / "out.json", tmp_path / "driver.log"
    ctl.mkdir()
    storage = tmp_path / "results"
    env = {**os.environ, "PYTHONPATH": worker_pythonpath(), "RAY_TRAIN_V2_ENABLED": "0",
           "TUNE_RESTORE_RETRY_NUM": "2"}
    env.pop("STATEMACHINE_DB_URL", None)
    with log.open("wb") as output:
        done = subprocess.run(
            [sys.executable, str(HERE / "ray_train_driver.py"), str(storage), "train",
             str(ctl), "1", str(out)],
            stdout=output, stderr=subprocess.STDOUT, env=env, timeout=400, check=False)
    assert done.returncode == 0, log.read_text()[-4000:]
    result = json.loads(out.read_text())
    assert list(result.values()) == [["TERMINATED", 1]]
    assert len(list(ctl.glob("load-*"))) == 3
    url = f"sqlite:///{storage / 'train' / 'statemachine.db'}"
    states = replay(url, "train")
    (trial_id,) = result
    assert (states[trial_id].failures, states[trial_id].total_restore_failures) == (1, 2)
    failed = [e for e in stored_events(url, "train", trial_id) if e.type_name == "TrialFailed"]
    assert [(e.event.error.kind, e.event.error.cause_type, e.decision) for e in failed] == [
        ("TrainingError", "builtins.ValueError", "RECOVER"),
        ("RestoreError", "builtins.OSError", "RETRY_RESTORE"),
        ("RestoreError", "builtins.OSError", "RETRY_RESTORE"),
    ]
