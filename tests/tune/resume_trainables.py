"""Trainables of the resume-after-crash scenarios: every executed iteration is counted.

Each iteration sleeps ``step_s`` and appends ``<trial_id> <iteration>`` to ``<ctl>/executed``
(one ``write`` of a short line in append mode: whole lines even across processes), then
reports with a checkpoint holding the iteration. An iteration found twice in that file was
run twice (redone after a crash).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any


def _count(ctl: str, trial_id: str, iteration: int) -> None:
    fd = os.open(str(Path(ctl, "executed")), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{trial_id} {iteration}\n".encode())
    finally:
        os.close(fd)


def function_counted(config: dict[str, Any]) -> None:
    """A function trainable: checkpoint (``state.json``) with every result; each iteration
    takes ``step_s`` times ``slow[str(x)]`` (default 1) seconds; iteration ``fail_at[str(x)]``
    raises (before it is counted) while ``<ctl>/fail`` exists."""
    try:
        from ray.tune import Checkpoint, get_checkpoint, get_context, report
    except ImportError:  # Ray 2.40 has them only in ray.train
        from ray.train import Checkpoint, get_checkpoint, get_context, report

    start = 0
    ckpt = get_checkpoint()
    if ckpt:
        with ckpt.as_directory() as folder:
            start = json.loads(Path(folder, "state.json").read_text())["it"]
    trial_id = get_context().get_trial_id()
    fail_at = config.get("fail_at", {}).get(str(config["x"]))
    for i in range(start + 1, config["iters"] + 1):
        time.sleep(config["step_s"] * config.get("slow", {}).get(str(config["x"]), 1))
        if i == fail_at and Path(config["ctl"], "fail").exists():
            raise RuntimeError(f"boom at iteration {i}")
        _count(config["ctl"], trial_id, i)
        with tempfile.TemporaryDirectory() as folder:
            Path(folder, "state.json").write_text(json.dumps({"it": i}))
            report({"score": i * config["x"]}, checkpoint=Checkpoint.from_directory(folder))


def _trainable_base() -> Any:
    from ray import tune

    return tune.Trainable


class ClassCounted(_trainable_base()):  # type: ignore[misc]
    """A class trainable: ``CheckpointConfig(checkpoint_frequency=1)`` saves every iteration."""

    def setup(self, config: dict[str, Any]) -> None:
        self.it = 0

    def step(self) -> dict[str, Any]:
        self.it += 1
        time.sleep(self.config["step_s"])
        _count(self.config["ctl"], self.trial_id, self.it)
        return {"score": self.it * self.config["x"], "done": self.it >= self.config["iters"]}

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        Path(checkpoint_dir, "state.json").write_text(json.dumps({"it": self.it}))

    def load_checkpoint(self, checkpoint_dir: str) -> None:
        self.it = json.loads(Path(checkpoint_dir, "state.json").read_text())["it"]


def executed(ctl: Path) -> list[tuple[str, int]]:
    """Every iteration run, in order."""
    path = ctl / "executed"
    if not path.exists():
        return []
    rows = [line.split() for line in path.read_text().splitlines() if line.strip()]
    return [(row[0], int(row[1])) for row in rows if len(row) == 2]


def redone(ctl: Path) -> int:
    """Iterations run more than once (each extra run counts)."""
    runs = executed(ctl)
    return len(runs) - len(set(runs))


def fails_while_marked(config: dict[str, Any]) -> None:
    """Raises at once while ``<ctl>/fail`` exists; reports one result otherwise."""
    try:
        from ray.tune import report
    except ImportError:  # Ray 2.40
        from ray.train import report

    if Path(config["ctl"], "fail").exists():
        raise RuntimeError("Failing!")
    report({"ok": 1})
