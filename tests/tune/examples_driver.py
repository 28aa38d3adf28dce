"""Runs a selection of Ray's own Tune examples with the event log, as users' drivers would.

usage: python examples_driver.py OUT_FOLDER SEED EXAMPLE[:reuse]...

``:reuse``: the example's controller reuses actors (``reuse_actors=True``, as a user would
set for a function trainable with many short trials; it saves an actor start per trial).

One Ray (2 CPUs) for all; each example module of ``ray.tune.examples`` runs as ``__main__``
with ``--smoke-test``. Every ``TuneController`` gets an ``EventLogCallback`` and, after it, a
``Witness`` of Ray's final statuses; every trainable fails at random (seeded,
:mod:`examples_hook`); trials get ``max_failures=2`` when the example gave none, so retries,
restores from checkpoints and PBT exploits meet the failures. Writes OUT_FOLDER/EXAMPLE.json:
``{"runs": [{"url", "experiment", "ray", "summary"}], "error"}``.
"""

from __future__ import annotations

import functools
import json
import os
import runpy
import sys
import traceback
from pathlib import Path
from typing import Any

import ray
from tune_trainables import Witness


def main(out: str, seed: str, *examples: str) -> None:
    folder = Path(out)
    fail_dir = folder / "failed"
    fail_dir.mkdir(parents=True, exist_ok=True)
    env = {"SM_FAIL_SEED": seed, "SM_FAIL_P": "0.08", "SM_FAIL_DIR": str(fail_dir)}
    ray.init(num_cpus=2, include_dashboard=False, address="local", log_to_driver=False,
             runtime_env={"worker_process_setup_hook": "examples_hook.setup",
                          "env_vars": env})
    ray.init = lambda *a, **k: None  # the examples' own ray.init: this one stands

    from ray.tune.execution.tune_controller import TuneController

    from statemachine.tune import EventLogCallback

    runs: list[dict[str, Any]] = []
    options = {"reuse": False}
    original_init = TuneController.__init__
    original_add = TuneController.add_trial

    @functools.wraps(original_init)
    def init(self: Any, *args: Any, callbacks: list[Any] | None = None, **kwargs: Any) -> None:
        callback = EventLogCallback()
        witness_path = folder / f"ray-{len(runs)}.json"
        runs.append({"callback": callback, "witness": witness_path})
        if options["reuse"]:
            kwargs["reuse_actors"] = True
        original_init(self, *args, callbacks=[*(callbacks or []), callback,
                                              Witness(str(witness_path))], **kwargs)

    def add_trial(self: Any, trial: Any) -> Any:
        if not trial.max_failures:
            trial.max_failures = 2
        return original_add(self, trial)

    TuneController.__init__ = init  # type: ignore[method-assign]
    TuneController.add_trial = add_trial  # type: ignore[method-assign]
    try:
        for given in examples:
            example, _, option = given.partition(":")
            options["reuse"] = option == "reuse"
            runs.clear()
            error = None
            sys.argv = [example, "--smoke-test"]
            try:
                runpy.run_module(f"ray.tune.examples.{example}", run_name="__main__")
            except BaseException as exc:  # the example's own checks of its results
                error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            report = {"error": error, "runs": [
                {"url": r["callback"].store_url, "experiment": r["callback"].experiment,
                 "summary": r["callback"].summary(),
                 "ray": json.loads(r["witness"].read_text()) if r["witness"].exists()
                 else None}
                for r in runs]}
            (folder / f"{example}.json").write_text(json.dumps(report))
    finally:
        ray.shutdown()


if __name__ == "__main__":
    os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")
    main(*sys.argv[1:])
