"""What the test trainables of the Tune and fault suites share: a counting ``tune.Trainable``
whose checkpoint is ``state.json`` holding ``{"i": iteration}``, and a once-only marker file.

Ray's workers import it as ``tests.trainables`` (the suites put the repository on their
``PYTHONPATH``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ray import tune


def touch_once(path: Path) -> bool:
    """Create ``path``; True only for the caller that created it."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def checkpoint_iteration(path: str | Path) -> int:
    """The iteration a checkpoint folder saved (from its ``state.json``)."""
    return int(json.loads(Path(path, "state.json").read_text())["i"])


class CountingTrainable(tune.Trainable):
    """Counts iterations in ``self.i``; ``config["ctl"]`` is the test's control folder.

    Subclasses write ``step``; a checkpoint saves ``self.i`` and restoring one reads it back.
    """

    def setup(self, config: dict[str, Any]) -> None:
        self.ctl = Path(config["ctl"])
        self.i = 0

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        Path(checkpoint_dir, "state.json").write_text(json.dumps({"i": self.i}))

    def load_checkpoint(self, checkpoint_dir: str) -> None:
        self.i = checkpoint_iteration(checkpoint_dir)
