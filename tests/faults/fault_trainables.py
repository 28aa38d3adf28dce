"""A tiny real trainable for the fault scenarios, leaving side files the tests count from.

In the control folder ``config["ctl"]`` (shared by the test, the driver and Ray's actors):
- ``beat-<trial>-<i>-<n>``: written when iteration ``i`` starts training (``n``: a counter, so
  an iteration repeated after a restore leaves another file);
- ``failed-<trial>-<i>``: written (once per trial and iteration) right before iteration ``i``
  raises ``ValueError``: the failures that really happened;
- ``saved-<trial>-<i>``: a checkpoint of iteration ``i`` was saved (its folder holds
  ``state.json`` with ``{"i": i}``, so a stored ``CheckpointSaved`` path is read back to ``i``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from tests.trainables import CountingTrainable, checkpoint_iteration, touch_once

__all__ = ["Steps", "beats", "checkpoint_iteration", "failures_that_happened",
           "last_beat_iteration"]


def beats(ctl: Path) -> int:
    """How many training iterations started so far (all trials, repeats included)."""
    return len(list(ctl.glob("beat-*")))


def last_beat_iteration(ctl: Path) -> int:
    """The iteration of the newest training step that started (0: none yet)."""
    newest = max(ctl.glob("beat-*"), key=lambda p: p.stat().st_mtime_ns, default=None)
    return int(newest.name.split("-")[2]) if newest is not None else 0


def failures_that_happened(ctl: Path) -> dict[str, int]:
    """``{trial_id: number of failures its trainable raised}`` from the side files."""
    counts: dict[str, int] = {}
    for path in ctl.glob("failed-*"):
        trial_id = path.name.split("-")[1]
        counts[trial_id] = counts.get(trial_id, 0) + 1
    return counts


class Steps(CountingTrainable):
    """Counts iterations, sleeping ``sleep`` seconds in each; fails once at each ``fail_at``.

    config: ``ctl`` (folder), ``iters``, ``sleep`` (seconds), ``fail_at`` (iterations that
    raise ``ValueError`` once per trial), ``holds`` (``{file name: iteration}``: from that
    iteration on, a step waits while that file exists in ``ctl``; ``{role}`` in a name becomes
    the actor's ``FAULT_DRIVER_ROLE``, so a test holds one driver's trial and not another's).
    """

    def step(self) -> dict[str, Any]:
        self.i += 1
        if self.i in self.config.get("fail_at", ()) and touch_once(
            self.ctl / f"failed-{self.trial_id}-{self.i}"
        ):
            raise ValueError(f"training failed at iteration {self.i}")
        role = os.environ.get("FAULT_DRIVER_ROLE", "")
        for name, start in self.config.get("holds", {}).items():
            while self.i >= start and (self.ctl / name.format(role=role)).exists():
                time.sleep(0.05)  # held by the test until it lets the trial go on
        n = 0
        while not touch_once(self.ctl / f"beat-{self.trial_id}-{self.i}-{n}"):
            n += 1
        time.sleep(self.config.get("sleep", 0.0))
        return {"score": self.i, "done": self.i >= self.config["iters"]}

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        super().save_checkpoint(checkpoint_dir)
        (self.ctl / f"saved-{self.trial_id}-{self.i}").write_text(str(time.time()))
