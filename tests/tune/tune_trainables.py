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
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from ray.tune import Callback
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


def always_fails(config: dict[str, Any]) -> None:
    """A function trainable whose every attempt writes ``attempt-<pid>-<n>`` then raises."""
    ctl = Path(config["ctl"])
    n = len(list(ctl.glob("attempt-*"))) + 1
    (ctl / f"attempt-{os.getpid()}-{n}-{time.monotonic_ns()}").touch()
    raise ValueError(f"attempt {n} fails")


def slow_or_failing(config: dict[str, Any]) -> None:
    """A function trainable: ``fail`` raises at once; else reports ``iters`` times, sleeping
    ``sleep`` seconds each (long enough that a stopper, a budget or SIGINT ends it first)."""
    try:
        from ray.tune import report
    except ImportError:  # Ray 2.40 has it only in ray.train
        from ray.train import report

    if config.get("fail"):
        raise ValueError("this trial fails at once")
    for i in range(int(config.get("iters", 3))):
        time.sleep(float(config.get("sleep", 0.0)))
        report({"score": i + 1})


class Witness(Callback):
    """A Tune callback placed after ``EventLogCallback``: at the experiment's end it writes Ray's
    final status of every trial to ``path`` (JSON), as Ray leaves them."""

    def __init__(self, path: str) -> None:
        self.path = path

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        """Ray's statuses, after every earlier callback's own ``on_experiment_end``."""
        Path(self.path).write_text(json.dumps({t.trial_id: t.status for t in trials}))
def load_attempts(ctl: Path, tag: str) -> int:
    """How many times the function trainable of trial ``tag`` loaded its checkpoint so far."""
    return len(list(ctl.glob(f"load-{tag}-*")))


def _load_state(ckpt: Any, ctl: Path, tag: str, fail_loads: int) -> int:
    """The function trainable's own load: attempts past ``fail_loads`` work."""
    n = load_attempts(ctl, tag) + 1
    (ctl / f"load-{tag}-{n}").write_text(str(os.getpid()))
    block = ctl / "block-load-after"
    if block.exists() and n > int(block.read_text()):
        time.sleep(3600)
    if fail_loads < 0 or n <= fail_loads:
        raise OSError(f"checkpoint load attempt {n} failed: storage unavailable")
    with ckpt.as_directory() as folder:
        return int(json.loads(Path(folder, "state.json").read_text())["i"])


def function_trainable(config: dict[str, Any]) -> None:
    """A function trainable (Ray's lead API) that loads its own checkpoint.

    config: ``ctl`` (folder), ``iters``, ``fail_at`` (iteration raising ``ValueError`` once,
    before it reports), ``bug_after_restore_at`` (iteration raising ``KeyError`` once, only
    in an attempt that restored), ``fail_loads`` (how many checkpoint loads fail, ``-1``: all;
    loads past the number in ``block-load-after`` hang),
    ``mark`` (load inside ``statemachine.tune.restoring()``), ``tag``; a ``variant`` dict
    (from a grid search) overrides any of them.
    """
    try:
        from ray.tune import Checkpoint, get_checkpoint, report
    except ImportError:  # Ray 2.40 has them only in ray.train
        from ray.train import Checkpoint, get_checkpoint, report

    from statemachine.tune import restoring

    cfg = {**config, **config.get("variant", {})}
    ctl, tag = Path(cfg["ctl"]), cfg.get("tag", "t")
    start = 0
    ckpt = get_checkpoint()
    if ckpt:
        if cfg.get("mark"):
            with restoring():
                start = _load_state(ckpt, ctl, tag, cfg.get("fail_loads", 0))
        else:
            start = _load_state(ckpt, ctl, tag, cfg.get("fail_loads", 0))
    for i in range(start + 1, cfg["iters"] + 1):
        if i == cfg.get("fail_at") and touch_once(ctl / f"failed-{tag}"):
            raise ValueError(f"training failed at iteration {i}")
        if (ckpt and i == cfg.get("bug_after_restore_at")
                and touch_once(ctl / f"bug-{tag}")):
            raise KeyError(f"genuine training bug at iteration {i}")
        with tempfile.TemporaryDirectory() as folder:
            Path(folder, "state.json").write_text(json.dumps({"i": i}))
            report({"score": i}, checkpoint=Checkpoint.from_directory(folder))


class FlakyMarked(Flaky):
    """``Flaky`` whose ``load_checkpoint`` runs inside ``statemachine.tune.restoring()``: a
    class trainable's restore is already typed by Ray, so the mark changes nothing."""

    def load_checkpoint(self, checkpoint_dir: str) -> None:
        from statemachine.tune import restoring

        with restoring():
            super().load_checkpoint(checkpoint_dir)


class SeededFaults(CountingTrainable):
    """Fails at known rates, seeded: each training iteration raises with probability
    ``p_fail`` and each restore with ``p_restore_fail``, the draws a function of ``seed``,
    the trial's ``tag``, the attempt (counted by files in ``ctl``) and the iteration."""

    def setup(self, config: dict[str, Any]) -> None:
        super().setup(config)
        tag = config["tag"]
        self.attempt = len(list(self.ctl.glob(f"attempt-{tag}-*"))) + 1
        (self.ctl / f"attempt-{tag}-{self.attempt}").write_text(str(os.getpid()))

    def _draw(self, what: str) -> float:
        import random

        cfg = self.config
        return random.Random(f"{cfg['seed']}/{cfg['tag']}/{self.attempt}/{what}").random()

    def step(self) -> dict[str, Any]:
        self.i += 1
        if self._draw(f"step-{self.i}") < self.config["p_fail"]:
            raise RuntimeError("injected training fault")
        time.sleep(self.config.get("sleep", 0.02))
        return {"score": self.i, "done": self.i >= self.config["iters"]}

    def load_checkpoint(self, checkpoint_dir: str) -> None:
        if self._draw("restore") < self.config["p_restore_fail"]:
            raise OSError("injected restore fault: storage unavailable")
        super().load_checkpoint(checkpoint_dir)
