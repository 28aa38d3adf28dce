"""Trainables of the ingest tests, run without the callback and steered by a control folder.

Each reads its case from ``config["case"]`` (one dict of a grid search) over ``config``.
``Faulty`` (a class trainable) fails as its case says: ``fail_at`` (iterations raising
``ValueError`` once each), ``die_at`` (an iteration killing its process once: an actor
death), ``fail_restores`` (how many of its ``load_checkpoint`` calls raise ``OSError``).
``resumable`` (a function trainable) reports a checkpoint with every result; ``fail_once_at``
raises once at that iteration. Both write ``<tag>-<iteration>`` when they report, so a test
knows how far a run got.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from ray import tune

try:
    from ray.tune import Checkpoint, get_checkpoint, report
except ImportError:  # Ray 2.40 has them only in ray.train
    from ray.train import Checkpoint, get_checkpoint, report  # type: ignore[no-redef]

from tests.trainables import touch_once


def _case(config: dict[str, Any]) -> dict[str, Any]:
    return {**config, **config.get("case", {})}


class Faulty(tune.Trainable):
    """Counts iterations; fails, dies or cannot restore as its case says."""

    def setup(self, config: dict[str, Any]) -> None:
        self.case = _case(config)
        self.ctl = Path(self.case["ctl"])
        self.tag = str(self.case["tag"])
        self.i = 0

    def step(self) -> dict[str, Any]:
        self.i += 1
        if self.i in self.case.get("fail_at", ()) and \
                touch_once(self.ctl / f"{self.tag}-failed-{self.i}"):
            raise ValueError(f"{self.tag} fails at iteration {self.i}")
        if self.i == self.case.get("die_at") and touch_once(self.ctl / f"{self.tag}-died"):
            os._exit(1)
        (self.ctl / f"{self.tag}-{self.i}").touch()
        return {"score": self.i, "done": self.i >= int(self.case["iters"])}

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        Path(checkpoint_dir, "state.json").write_text(json.dumps({"i": self.i}))

    def load_checkpoint(self, checkpoint_dir: str) -> None:
        n = len(list(self.ctl.glob(f"{self.tag}-restore-*"))) + 1
        (self.ctl / f"{self.tag}-restore-{n}").touch()
        if n <= int(self.case.get("fail_restores", 0)):
            raise OSError(f"{self.tag}: restore {n} failed")
        self.i = int(json.loads(Path(checkpoint_dir, "state.json").read_text())["i"])


def resumable(config: dict[str, Any]) -> None:
    """Reports ``iters`` results, each with a checkpoint, ``sleep`` seconds apart."""
    case = _case(config)
    ctl, tag = Path(case["ctl"]), str(case["tag"])
    start = 0
    checkpoint = get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            start = int(json.loads(Path(folder, "state.json").read_text())["i"])
    for i in range(start + 1, int(case["iters"]) + 1):
        if i == case.get("fail_once_at") and touch_once(ctl / f"{tag}-failed-{i}"):
            raise ValueError(f"{tag} fails at iteration {i}")
        time.sleep(float(case.get("sleep", 0.0)))
        with tempfile.TemporaryDirectory() as folder:
            Path(folder, "state.json").write_text(json.dumps({"i": i}))
            report({"score": i}, checkpoint=Checkpoint.from_directory(folder))
        (ctl / f"{tag}-{i}").touch()
