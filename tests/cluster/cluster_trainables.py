"""Trainables for the cluster tests: they know which node they run on by its labels.

``BadDisk`` restores its checkpoint on every node but one carrying the label
``sm-test/disk: bad`` (there ``load_checkpoint`` fails, as a node that lost its disk would);
``Slow`` trains slowly so a node can be removed under it. Each restore attempt writes
``restore-<n>`` (its node's name) into the control folder ``config["ctl"]``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import ray
from ray import tune


def node_name() -> str:
    """The ``sm-test/name`` label of the node this process runs on (Ray 2.40's runtime
    context has no labels: there, the node's resource of the same name)."""
    context = ray.get_runtime_context()
    if hasattr(context, "get_node_labels"):
        return str(context.get_node_labels().get("sm-test/name", "?"))
    node_id = context.get_node_id()
    node = next((n for n in ray.nodes() if n["NodeID"] == node_id), {})
    names = [r for r in node.get("Resources", {}) if r.startswith("w") and r[1:2].isdigit()]
    return names[0] if names else "?"


def _disk_is_bad() -> bool:
    context = ray.get_runtime_context()  # Ray 2.40: no labels, no bad disk
    labels = context.get_node_labels() if hasattr(context, "get_node_labels") else {}
    return bool(labels.get("sm-test/disk") == "bad")


class Steps(tune.Trainable):
    """Counts to ``config["iters"]``, sleeping ``config["sleep"]`` per step; checkpoints
    each step; a restore on a node whose disk is bad fails."""

    def setup(self, config: dict[str, Any]) -> None:
        self.ctl = Path(config["ctl"])
        self.i = 0
        (self.ctl / f"started-{os.getpid()}").write_text(node_name())

    def step(self) -> dict[str, Any]:
        self.i += 1
        fail_at = self.config.get("fail_at")
        marker = self.ctl / "failed-once"
        if fail_at == self.i and not marker.exists():
            marker.write_text(node_name())
            raise RuntimeError(f"training failed at step {self.i} on {node_name()}")
        time.sleep(self.config.get("sleep", 0.0))
        return {"score": self.i, "node": node_name(), "done": self.i >= self.config["iters"]}

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        Path(checkpoint_dir, "state.json").write_text(json.dumps({"i": self.i}))

    def load_checkpoint(self, checkpoint_dir: str) -> None:
        n = len(list(self.ctl.glob("restore-*"))) + 1
        (self.ctl / f"restore-{n}").write_text(node_name())
        if _disk_is_bad():
            raise OSError(f"cannot read {Path(checkpoint_dir).name} on {node_name()}: bad disk")
        self.i = json.loads(Path(checkpoint_dir, "state.json").read_text())["i"]


def restores(ctl: Path) -> list[str]:
    """The node of every restore attempt, in order."""
    files = sorted(ctl.glob("restore-*"), key=lambda p: int(p.name.split("-")[1]))
    return [p.read_text() for p in files]
