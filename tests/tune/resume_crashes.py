"""One crash-and-resume run of ``resume_driver.py``, killed as often as asked (issue 27).

Shared by tests/tune/test_tune_resume_scenarios.py and the benchmark section ``resume``
(benchmarks/resume.py): ``fit``, SIGKILLed (with its process group) after a seeded random
number of executed iterations, ``Tuner.restore(resume_errored=True)`` SIGKILLed the same way
``kills - 1`` more times, then restored to the end. After each kill it notes which
checkpoint iteration the log held for each trial (SQLite, where the dead driver left it).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from resume_trainables import executed

from tests.tune.tunekit import HERE, kill_group, worker_pythonpath

DRIVER = HERE / "resume_driver.py"

#: A condition on the iterations executed so far (``(trial id, iteration)``, in order).
When = Callable[[list[tuple[str, int]]], bool]


@dataclass
class Crashes:
    """One run: its folders, the drivers' settings, what each kill left in the log.

    ``callback``: ``"1"`` (``EventLogCallback()``), ``"off"`` (``resume_from_log=False``)
    or ``"0"`` (plain Ray).
    """

    tmp: Path
    storage: str
    trials: int
    iters: int
    step_s: float
    callback: str = "1"
    env: dict[str, str] = field(default_factory=dict)
    logged_at_kills: list[dict[str, int]] = field(default_factory=list)
    executed_at_kills: list[int] = field(default_factory=list)
    restore_s: float = 0.0
    """Wall time of the drivers after the last kill (the final restore)."""

    @property
    def ctl(self) -> Path:
        """The folder the trainables count their iterations in."""
        return self.tmp / "ctl"

    def log_path(self) -> Path:
        """The driver's SQLite log: in the experiment folder, or (remote storage) under the
        driver's ``~/ray_results``."""
        if "://" not in self.storage:
            return Path(self.storage, "exp", "statemachine.db")
        (path,) = Path(self.env["HOME"], "ray_results", "exp").glob("*/statemachine.db")
        return path

    def driver(self, mode: str, kind: str) -> subprocess.Popen[bytes]:
        """Start ``resume_driver.py mode`` in its own session."""
        env = {**os.environ, **self.env, "PYTHONPATH": worker_pythonpath(),
               "RAY_DEDUP_LOGS": "0", "RESUME_ITERS": str(self.iters),
               "RESUME_TRIALS": str(self.trials), "RESUME_STEP_S": str(self.step_s)}
        env.pop("STATEMACHINE_DB_URL", None)
        args = [mode, self.storage, "exp", str(self.ctl), self.callback, kind,
                str(self.tmp / "out.json")]
        with (self.tmp / f"{mode}.log").open("ab") as out:
            return subprocess.Popen([sys.executable, str(DRIVER), *args], stdout=out,
                                    stderr=subprocess.STDOUT, env=env, cwd=self.tmp,
                                    start_new_session=True)

    def kill_after(self, proc: subprocess.Popen[bytes], count: int | When) -> None:
        """SIGKILL ``proc`` once ``count`` iterations have been executed in all (or ``count``
        holds of the executed iterations); note what the log held then."""
        when = count if callable(count) else (lambda runs: len(runs) >= count)
        try:
            while not when(executed(self.ctl)) and proc.poll() is None:
                time.sleep(0.05)
            assert proc.poll() is None, f"the driver ended before {count} executed iterations"
        finally:
            kill_group(proc)
        self.executed_at_kills.append(len(executed(self.ctl)))
        if self.callback != "0":
            self.logged_at_kills.append(last_checkpointed(f"sqlite:///{self.log_path()}"))

    def run(self, kind: str, kills: int, seed: str,
            first: tuple[int, int] | When | None = None) -> dict[str, Any]:
        """Fit, ``kills`` seeded kills, then restore to the end; the final grid's rows.

        The first kill comes after ``randint(*first)`` executed iterations (default: 2 to a
        third of them; or once ``first`` holds of the executed iterations), each later one 3
        to 5 iterations after the previous kill.
        """
        self.ctl.mkdir(parents=True)
        rng = random.Random(seed)
        if callable(first):
            self.kill_after(self.driver("fit", kind), first)
        else:
            low, high = first or (2, self.trials * self.iters // 3)
            self.kill_after(self.driver("fit", kind), rng.randint(low, high))
        for _ in range(kills - 1):
            restore = self.driver("restore", kind)
            self.kill_after(restore, self.executed_at_kills[-1] + rng.randint(3, 5))
        started = time.monotonic()
        final = self.driver("restore", kind)
        try:
            assert final.wait(timeout=900) == 0, (self.tmp / "restore.log").read_text()[-3000:]
        finally:
            kill_group(final)
        self.restore_s = time.monotonic() - started
        grid: dict[str, Any] = json.loads((self.tmp / "out.json").read_text())
        return grid

    def redone(self) -> int:
        """Iterations run more than once (each extra run counts)."""
        runs = executed(self.ctl)
        return len(runs) - len(set(runs))

    def redone_beyond_checkpoints(self) -> list[tuple[str, int]]:
        """Iterations run again although, at the kill before that run, the log already held
        a checkpoint of that trial at or after them (0 with the callback).

        A run's kill is the last one noted before it in ``executed``; Ray's workers may
        finish an iteration after the driver's kill (orphans until they see it gone), which
        is work in flight that no log can know of, counted after that kill."""
        runs = executed(self.ctl)
        beyond = []
        for index, (trial, it) in enumerate(runs):
            if (trial, it) not in runs[:index]:
                continue  # a first run
            kills = [k for k, count in enumerate(self.executed_at_kills) if count <= index]
            if not kills or it <= self.logged_at_kills[kills[-1]].get(trial, 0):
                beyond.append((trial, it))
        return beyond

    def uninterrupted_grid(self) -> dict[str, list[Any]]:
        """What an uninterrupted run's ``ResultGrid`` holds (the driver's rows, by config x):
        no error, the last result at iteration ``iters`` with score ``iters * x``, the
        checkpoint of the last iteration (one every iteration, numbered from 0)."""
        return {str(x): [None, self.iters, f"checkpoint_{self.iters - 1:06d}", self.iters * x]
                for x in range(1, self.trials + 1)}


def last_checkpointed(url: str) -> dict[str, int]:
    """Per trial, the iteration of the newest checkpoint the log holds (0: none)."""
    from statemachine.log import EventStore

    with EventStore.open(url, create=False) as store:
        return {trial: max([e.event.iteration or 0 for e in store.read_trial("exp", trial)
                            if e.type_name == "CheckpointSaved"], default=0)
                for trial in store.list_trials("exp")}
