"""Small real trainables for the Tune integration tests, steered by files in a control folder.

The control folder (``config["ctl"]``, an absolute path) holds marker files, so the test and
the trainable's actor (another process) agree on what happened: each restore attempt writes
``restore-<n>``; ``fail-restores`` holds how many restore attempts fail (``-1``: all);
``bad-checkpoint`` names a checkpoint folder whose restore always fails;
``block-restore-after`` makes restore attempts past that number hang (the driver-crash test
kills the driver while one hangs).
"""

from __future__ import annotations

import builtins
import os
import time
from pathlib import Path
from typing import Any

from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from tests.trainables import CountingTrainable, touch_once


def restore_attempts(ctl: Path) -> int:
    """How many restore attempts the trainables made so far."""
    return len(list(ctl.glob("restore-*")))


class Flaky(CountingTrainable):
    """Counts iterations; fails as ``config`` says.

    config: ``ctl`` (folder), ``iters`` (iterations to run), ``fail_at`` (iteration raising
    ``ValueError`` once), ``die_at`` (iteration calling ``os._exit(1)`` once), ``raise_type``
    (name of a builtin exception to raise at ``fail_at`` instead, every time); a ``variant``
    dict (from a grid search) overrides any of them.
    """

    def step(self) -> dict[str, Any]:
        self.i += 1
        cfg = {**self.config, **self.config.get("variant", {})}
        tag = cfg.get("tag", "t")
        if cfg.get("fail_at") == self.i:
            raise_type = cfg.get("raise_type")
            if raise_type:
                raise getattr(builtins, raise_type)(f"{raise_type} raised by config")
            if touch_once(self.ctl / f"failed-{tag}"):
                raise ValueError(f"training failed at iteration {self.i}")
        if cfg.get("die_at") == self.i and touch_once(self.ctl / f"died-{tag}"):
            os._exit(1)
        time.sleep(cfg.get("sleep", 0.0))
        return {"score": self.i, "done": self.i >= cfg["iters"]}

    def load_checkpoint(self, checkpoint_dir: str) -> None:
        n = restore_attempts(self.ctl) + 1
        (self.ctl / f"restore-{n}").write_text(str(os.getpid()))
        block = self.ctl / "block-restore-after"
        if block.exists() and n > int(block.read_text()):
            time.sleep(3600)
        bad = self.ctl / "bad-checkpoint"
        if bad.exists() and Path(checkpoint_dir).name == bad.read_text():
            raise OSError(f"checkpoint {Path(checkpoint_dir).name} is corrupt")
        fails_file = self.ctl / "fail-restores"
        fails = int(fails_file.read_text()) if fails_file.exists() else 0
        if fails < 0 or n <= fails:
            raise OSError(f"restore attempt {n} failed: storage unavailable")
        super().load_checkpoint(checkpoint_dir)


class PauseOnce(FIFOScheduler):
    """FIFO, but pauses every trial once at iteration ``at`` (it resumes when chosen again)."""

    def __init__(self, at: int = 2) -> None:
        super().__init__()
        self.at = at
        self.paused: set[str] = set()

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> str:
        if result.get("training_iteration") == self.at and trial.trial_id not in self.paused:
            self.paused.add(trial.trial_id)
            return TrialScheduler.PAUSE
        return TrialScheduler.CONTINUE
