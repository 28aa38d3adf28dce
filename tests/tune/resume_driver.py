"""A Tune driver of the resume-after-crash scenarios, run as its own process (and group).

usage: python resume_driver.py fit|restore STORAGE NAME CTL WITH_CALLBACK KIND OUT_JSON

``fit`` starts ``TRIALS`` trials x ``ITERS`` iterations of ``STEP_S`` seconds (2 at a time;
``$RESUME_TRIALS``, ``$RESUME_ITERS``, ``$RESUME_STEP_S``, default 4 x 8 of 0.4 s), a
checkpoint every iteration (``$RESUME_SLOW``, JSON ``{"<x>": factor}``: the trials whose
iterations take that many times longer, function trainable; ``$RESUME_FAIL``, JSON ``{"<x>":
iteration}``: the trials that raise at that iteration while ``CTL/fail`` exists, no retry);
the test SIGKILLs it.
``restore`` continues with ``Tuner.restore`` and writes, per trial, ``[status,
training_iteration of its last result, its checkpoint's folder name]`` from the
``ResultGrid``. KIND is ``function`` or ``class``; WITH_CALLBACK ``0`` (plain Ray), ``1``
(``EventLogCallback()``) or ``off`` (``EventLogCallback(resume_from_log=False)``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import ray
from ray import tune
from resume_trainables import ClassCounted, function_counted

from statemachine.tune import CheckpointConfig, RunConfig

ITERS = int(os.environ.get("RESUME_ITERS", "8"))
TRIALS = int(os.environ.get("RESUME_TRIALS", "4"))
STEP_S = float(os.environ.get("RESUME_STEP_S", "0.4"))
SLOW = {"slow": json.loads(os.environ["RESUME_SLOW"])} if os.environ.get("RESUME_SLOW") else {}
FAIL = ({"fail_at": json.loads(os.environ["RESUME_FAIL"])} if os.environ.get("RESUME_FAIL")
        else {})


def main(mode: str, storage: str, name: str, ctl: str, with_callback: str, kind: str,
         out: str) -> None:
    ray.init(num_cpus=2, include_dashboard=False, address="local")
    trainable: object = function_counted if kind == "function" else ClassCounted
    checkpoints = CheckpointConfig() if kind == "function" else CheckpointConfig(
        checkpoint_frequency=1)
    uri = "://" in storage
    where = f"{storage.rstrip('/')}/{name}" if uri else str(Path(storage, name))
    try:
        if mode == "fit":
            callbacks = []
            if with_callback != "0":
                from statemachine.tune import EventLogCallback

                callbacks.append(EventLogCallback(resume_from_log=with_callback != "off"))
            tuner = tune.Tuner(
                trainable,
                param_space={"ctl": ctl, "iters": ITERS, "step_s": STEP_S,
                             "x": tune.grid_search(list(range(1, TRIALS + 1))), **SLOW, **FAIL},
                tune_config=tune.TuneConfig(max_concurrent_trials=2),
                run_config=RunConfig(name=name, storage_path=storage, callbacks=callbacks,
                                     verbose=0, checkpoint_config=checkpoints,
                                     stop={"training_iteration": ITERS}),
            )
        else:
            tuner = tune.Tuner.restore(where, trainable=trainable, resume_errored=True)
        grid = tuner.fit()
        rows = {}
        for result in grid:
            key = str(result.config["x"])
            ckpt = result.checkpoint.path.rstrip("/").rsplit("/", 1)[-1] \
                if result.checkpoint else None
            rows[key] = [None if result.error is None else "ERROR",
                              result.metrics.get("training_iteration"), ckpt,
                              result.metrics.get("score")]
        Path(out).write_text(json.dumps(rows))
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:])
