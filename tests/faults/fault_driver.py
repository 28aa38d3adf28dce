"""A real Tune driver process for the kill loop and the two-driver scenario.

usage: ``python -m tests.faults.fault_driver fit|restore STORAGE NAME CONFIG_JSON CPUS OUT_JSON``
(from the repository root). ``fit`` starts the experiment (``Steps``, one trial, a checkpoint
every iteration, the ``EventLogCallback`` with its default store in the experiment folder);
``restore`` continues it with ``Tuner.restore`` (the callback comes back from the experiment
state). At the end OUT_JSON gets Ray's view (``{trial_id: [status, num_failures]}``), the
callback's summary as it logged it, every statemachine warning or error it logged, and the
error of every trial that ended in ERROR. The driver's ``FAULT_DRIVER_ROLE`` reaches its trial
actors (``Steps`` holds by role).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import ray
from ray import tune

from statemachine.tune import CheckpointConfig, FailureConfig, RunConfig
from tests.faults.fault_trainables import Steps


class Keep(logging.Handler):
    """Keeps statemachine's log records: the summary and the warnings."""

    def __init__(self) -> None:
        super().__init__(level=logging.INFO)
        self.summary: dict[str, Any] | None = None
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        # A single dict argument becomes ``record.args`` itself (logging's own rule).
        args = record.args if isinstance(record.args, tuple) else (record.args,)
        for arg in args:
            if isinstance(arg, dict) and "recorded" in arg:
                self.summary = dict(arg)
        if record.levelno >= logging.WARNING:
            self.messages.append(f"{record.levelname}: {record.getMessage()}")


def main(mode: str, storage: str, name: str, config: str, cpus: str, out: str) -> None:
    from statemachine.tune import EventLogCallback

    keep = Keep()
    logger = logging.getLogger("statemachine")
    logger.setLevel(logging.INFO)
    logger.addHandler(keep)
    role = os.environ.get("FAULT_DRIVER_ROLE", "")
    ray.init(num_cpus=int(cpus), include_dashboard=False, address="local",
             runtime_env={"env_vars": {"FAULT_DRIVER_ROLE": role}})
    try:
        if mode == "fit":
            tuner = tune.Tuner(
                Steps,
                param_space=json.loads(config),
                run_config=RunConfig(
                    name=name, storage_path=storage, callbacks=[EventLogCallback()], verbose=0,
                    failure_config=FailureConfig(max_failures=10),
                    checkpoint_config=CheckpointConfig(checkpoint_frequency=1),
                ),
            )
        else:
            tuner = tune.Tuner.restore(str(Path(storage, name)), trainable=Steps)
        grid = tuner.fit()
        trials = grid._experiment_analysis.trials
        Path(out).write_text(json.dumps({
            "ray": {t.trial_id: [t.status, t.num_failures] for t in trials},
            "summary": keep.summary,
            "messages": keep.messages,
            "errors": {t.trial_id: Path(t.error_file).read_text(errors="replace")[-3000:]
                       for t in trials if t.error_file and Path(t.error_file).exists()},
        }))
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:])
