"""A Tune driver on the cluster's head node, run as its own process (and process group).

usage: python cluster_driver.py fit|restore ADDRESS STORAGE NAME CTL URL OUT_JSON

``fit`` runs one ``Steps`` trial (paused once, so it restores) with
``EventLogCallback(URL, RetryPolicy(avoid_failed_nodes=True, ...))``; the test SIGKILLs it
mid-run. ``restore`` continues with ``Tuner.restore`` (the callback comes back from the
experiment state) and writes ``{trial_id: [status, num_failures]}`` to OUT_JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import ray
from cluster_trainables import Steps
from ray import tune


def main(mode: str, address: str, storage: str, name: str, ctl: str, url: str,
         out: str) -> None:
    ray.init(address=address, log_to_driver=False)
    try:
        if mode == "fit":
            from statemachine import RetryPolicy
            from statemachine.tune import (
                CheckpointConfig,
                EventLogCallback,
                FailureConfig,
                RunConfig,
            )
            from tests.tune.tune_trainables import PauseOnce

            policy = RetryPolicy(max_failures=0, restore_retry_num=2, avoid_failed_nodes=True)
            tuner = tune.Tuner(
                Steps,
                param_space={"ctl": ctl, "iters": 4},
                tune_config=tune.TuneConfig(scheduler=PauseOnce(at=2)),
                run_config=RunConfig(
                    name=name, storage_path=storage, verbose=0,
                    callbacks=[EventLogCallback(url, policy)],
                    failure_config=FailureConfig(max_failures=0),
                    checkpoint_config=CheckpointConfig(checkpoint_frequency=1),
                ),
            )
        else:
            tuner = tune.Tuner.restore(str(Path(storage, name)), trainable=Steps)
        grid = tuner.fit()
        trials = grid._experiment_analysis.trials
        Path(out).write_text(json.dumps({t.trial_id: [t.status, t.num_failures]
                                         for t in trials}))
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:])
