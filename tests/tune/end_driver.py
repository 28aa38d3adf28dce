"""A Tune driver for the SIGINT test of ``test_tune_experiment_end.py``, run as its own process.

usage: python end_driver.py FOLDER. Four slow trials on 2 CPUs; the test sends SIGINT.
Writes FOLDER/ray.json (Ray's final statuses, by the ``Witness`` callback) and
FOLDER/summary.json (the event log callback's counts).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import ray
from ray import tune
from tune_trainables import Witness, slow_or_failing

from statemachine.tune import EventLogCallback, RunConfig


def main(folder: str) -> None:
    ray.init(num_cpus=2, include_dashboard=False, address="local")
    try:
        callback = EventLogCallback()
        tuner = tune.Tuner(
            slow_or_failing,
            param_space={"n": tune.grid_search([0, 1, 2, 3]), "sleep": 1.0, "iters": 60},
            run_config=RunConfig(name="end", storage_path=str(Path(folder, "results")),
                                 callbacks=[callback, Witness(str(Path(folder, "ray.json")))],
                                 verbose=0),
        )
        tuner.fit()
        Path(folder, "summary.json").write_text(json.dumps(callback.summary()))
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:])
