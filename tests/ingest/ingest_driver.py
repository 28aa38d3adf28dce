"""A Tune driver of the ingest tests, without the callback, run as its own process group.

usage: python ingest_driver.py fit|restore ADDRESS STORAGE NAME CTL OUT_JSON

It joins the Ray cluster at ADDRESS (the test's own). ``fit`` runs ``resumable`` for two
trials under ``max_failures=0`` (``e`` fails at iteration 2 and ends ERROR; ``s`` reports
slowly) until the test SIGKILLs it; ``restore`` continues with ``Tuner.restore(...,
resume_errored=True)`` and writes ``{trial_id: [status, num_failures]}`` from the
``ResultGrid`` to OUT_JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import ray
from ingest_trainables import resumable
from ray import tune

from statemachine.tune import FailureConfig, RunConfig

CASES = [
    {"tag": "e", "iters": 3, "fail_once_at": 2},
    {"tag": "s", "iters": 12, "sleep": 0.4},
]


def main(mode: str, address: str, storage: str, name: str, ctl: str, out: str) -> None:
    ray.init(address=address, log_to_driver=False)
    try:
        if mode == "fit":
            tuner = tune.Tuner(
                resumable, param_space={"ctl": ctl, "case": tune.grid_search(CASES)},
                run_config=RunConfig(name=name, storage_path=storage, verbose=0,
                                     failure_config=FailureConfig(max_failures=0)))
        else:
            tuner = tune.Tuner.restore(str(Path(storage, name)), trainable=resumable,
                                       resume_errored=True)
        grid = tuner.fit()
        trials = grid._experiment_analysis.trials
        Path(out).write_text(json.dumps(
            {t.trial_id: [t.status, t.run_metadata.num_failures] for t in trials}))
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:])
