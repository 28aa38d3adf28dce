"""The demo's trainable: a tiny counter whose failures are steered by files in a folder.

Ray imports this module in its worker processes. Files in the control folder (``ctl``) tell
each trial (by its ``tag``) what to do, so the demo and the trial's actor (another process)
agree on what happened: ``restore-<tag>-<n>`` records restore attempt ``n``;
``fail-restores-<tag>`` holds how many restore attempts fail (``-1``: all);
``hang-restore-<tag>`` makes that restore attempt number hang (the demo kills the driver
then, as a crash would).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from ray import tune


def restore_attempts(ctl: Path, tag: str) -> int:
    """How many restore attempts trial ``tag`` made so far."""
    return len(list(ctl.glob(f"restore-{tag}-*")))


class DemoTrainable(tune.Trainable):
    """Counts to ``iters``; raises once at ``fail_at``; restores as the control folder says."""

    def setup(self, config: dict[str, Any]) -> None:
        self.ctl = Path(config["ctl"])
        self.tag = str(config["variant"]["tag"])
        self.variant = config["variant"]
        self.i = 0

    def step(self) -> dict[str, Any]:
        self.i += 1
        marker = self.ctl / f"failed-{self.tag}"
        if self.variant.get("fail_at") == self.i and not marker.exists():
            marker.write_text("1")
            raise ValueError(f"loss is NaN at iteration {self.i}")
        time.sleep(float(self.variant.get("sleep", 0.2)))
        return {"score": self.i, "done": self.i >= int(self.variant["iters"])}

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        Path(checkpoint_dir, "state.json").write_text(json.dumps({"i": self.i}))

    def load_checkpoint(self, checkpoint_dir: dict[Any, Any] | str | None) -> None:
        # Ray's stub says dict; a save_checkpoint that returns None gets the folder's path.
        assert isinstance(checkpoint_dir, str), checkpoint_dir
        n = restore_attempts(self.ctl, self.tag) + 1
        (self.ctl / f"restore-{self.tag}-{n}").write_text(str(os.getpid()))
        hang = self.ctl / f"hang-restore-{self.tag}"
        if hang.exists() and n == int(hang.read_text()):
            while hang.exists():  # the driver is killed meanwhile; the file goes after
                time.sleep(0.1)
        fails_file = self.ctl / f"fail-restores-{self.tag}"
        fails = int(fails_file.read_text()) if fails_file.exists() else 0
        if fails < 0 or n <= fails:
            raise OSError(f"restore attempt {n}: checkpoint storage unavailable")
        self.i = json.loads(Path(checkpoint_dir, "state.json").read_text())["i"]
