"""A Tune driver for the driver-crash test, run as its own process (and process group).

usage: python tune_crash_driver.py fit|restore STORAGE NAME CTL WITH_CALLBACK OUT_JSON

``fit`` starts the experiment (the test SIGKILLs it mid-run); ``restore`` continues it with
``Tuner.restore`` and writes ``{trial_id: [status, num_failures]}`` from the ``ResultGrid``
to OUT_JSON. The callback, when used, comes back from the experiment state by itself.
STORAGE is a folder or a URI (``s3://bucket/path``); WITH_CALLBACK is ``0`` (plain Ray),
``1`` (``EventLogCallback()``) or the log URL given to ``EventLogCallback(url)``.
With ``CRASH_TRAINABLE=function`` in the environment the trial is ``function_trainable``,
loading its checkpoint inside ``restoring()``, every load failing.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import ray
from ray import tune
from tune_trainables import Flaky, function_trainable

from statemachine.tune import CheckpointConfig, FailureConfig, RunConfig


def main(mode: str, storage: str, name: str, ctl: str, with_callback: str, out: str) -> None:
    ray.init(num_cpus=2, include_dashboard=False, address="local")
    trainable: object = Flaky
    space = {"ctl": ctl, "iters": 4, "fail_at": 2}
    checkpoints = CheckpointConfig(checkpoint_frequency=1)
    if os.environ.get("CRASH_TRAINABLE") == "function":
        trainable = function_trainable  # it reports a checkpoint with every result
        space.update(mark=True, fail_loads=-1)
        checkpoints = CheckpointConfig()
    try:
        if mode == "fit":
            callbacks = []
            if with_callback != "0":
                from statemachine.tune import EventLogCallback

                url = None if with_callback == "1" else with_callback
                callbacks.append(EventLogCallback(url))
            tuner = tune.Tuner(
                trainable,
                param_space=space,
                run_config=RunConfig(
                    name=name, storage_path=storage, callbacks=callbacks, verbose=0,
                    failure_config=FailureConfig(max_failures=2),
                    checkpoint_config=checkpoints,
                ),
            )
        else:
            uri = "://" in storage
            where = f"{storage.rstrip('/')}/{name}" if uri else str(Path(storage, name))
            tuner = tune.Tuner.restore(where, trainable=trainable)
        grid = tuner.fit()
        trials = grid._experiment_analysis.trials
        Path(out).write_text(json.dumps({t.trial_id: [t.status, t.num_failures] for t in trials}))
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:])
