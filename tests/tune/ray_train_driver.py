"""A Tune driver whose trainable is a Ray Train ``DataParallelTrainer`` (run as its own process).

usage: RAY_TRAIN_V2_ENABLED=0 python ray_train_driver.py STORAGE NAME CTL MARK OUT_JSON

The trainer's loop (one CPU worker) checkpoints, fails once in training, and then its own
checkpoint load fails twice and works the third time; with MARK=1 the load runs inside
``statemachine.tune.restoring()``. ``TUNE_RESTORE_RETRY_NUM=2``, ``max_failures=1``. Writes
``{trial_id: [status, num_failures]}`` from the ``ResultGrid`` to OUT_JSON.

Ray 2.60 runs Ray Train V2 by default, where a trainer is not a Tune trainable at all (a V2
trainer runs inside a Tune function trainable and retries its workers itself, under Train's
own ``FailureConfig``): ``DataParallelTrainer`` inside ``Tuner`` is Ray Train V1
(``RAY_TRAIN_V2_ENABLED=0``, set for the driver and its workers).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any


def train_loop(config: dict[str, Any]) -> None:
    """Ray Train's loop: loads its own checkpoint (inside ``restoring()`` when marked)."""
    from ray import train

    from statemachine.tune import restoring

    ctl = Path(config["ctl"])
    ckpt = train.get_checkpoint()

    def load() -> int:
        n = len(list(ctl.glob("load-*"))) + 1
        (ctl / f"load-{n}").write_text(str(os.getpid()))
        if n <= 2:
            raise OSError(f"checkpoint load attempt {n} failed: storage unavailable")
        assert ckpt is not None
        with ckpt.as_directory() as folder:
            return int(json.loads(Path(folder, "state.json").read_text())["i"])

    start = 0
    if ckpt:
        if config["mark"]:
            with restoring():
                start = load()
        else:
            start = load()
    for i in range(start + 1, 4):
        if i == 2 and not (ctl / "failed").exists():
            (ctl / "failed").write_text("x")
            raise ValueError(f"training failed at iteration {i}")
        with tempfile.TemporaryDirectory() as folder:
            Path(folder, "state.json").write_text(json.dumps({"i": i}))
            train.report({"score": i}, checkpoint=train.Checkpoint.from_directory(folder))


def main(storage: str, name: str, ctl: str, mark: str, out: str) -> None:
    import ray

    ray.init(num_cpus=2, include_dashboard=False, address="local")
    try:
        from ray import tune
        from ray.train import ScalingConfig
        from ray.train.data_parallel_trainer import DataParallelTrainer

        from statemachine.tune import EventLogCallback, FailureConfig, RunConfig

        trainer = DataParallelTrainer(
            train_loop, train_loop_config={"ctl": ctl, "mark": mark == "1"},
            scaling_config=ScalingConfig(num_workers=1, resources_per_worker={"CPU": 1}))
        tuner = tune.Tuner(trainer, run_config=RunConfig(
            name=name, storage_path=storage, callbacks=[EventLogCallback()], verbose=0,
            failure_config=FailureConfig(max_failures=1)))
        grid = tuner.fit()
        trials = grid._experiment_analysis.trials
        Path(out).write_text(json.dumps({t.trial_id: [t.status, t.num_failures] for t in trials}))
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:])
