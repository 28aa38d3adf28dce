"""Section ``tune-busy``: a busy Ray Tune driver, with and without ``EventLogCallback``.

100 trials (6 under ``--quick``) of a class trainable on ``ray.init(num_cpus=2)``, each
running ``ITERS`` fast iterations (no sleep) and checkpointing after every one: thousands of
results and checkpoints go through the driver loop in a couple of minutes. Every tenth trial
raises once mid-run (a counted failure, restored from its last checkpoint) and every
twentieth also fails its first restore. ``FailureConfig(max_failures=3)``; Tune's own
settings (result buffering and the like) left at their defaults.

Figures: ``Tuner.fit()`` wall time of each variant (rounds alternate the two), the driver's
loop time per result (wall time over the results Tune processed), and the time the driver
spent inside the callback's hooks, per result and per hook call (p99 and longest). Each run
with the callback is checked after: every trial TERMINATED in Ray and in the log, the
failures counted exactly, a checkpoint event per checkpoint, nothing unwritten.
"""

from __future__ import annotations

import json
import os
import statistics
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.harness import Context, Stat
from benchmarks.tune_overhead import check_outcome, local_ray

ITERS = 50
FAIL_AT = 25
TARGET = 1.05
HOOKS = ("on_step_begin", "on_step_end", "on_trial_start", "on_trial_restore",
         "on_trial_save", "on_trial_result", "on_trial_complete", "on_trial_recover",
         "on_trial_error", "on_checkpoint", "on_experiment_end")


def _touch_once(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def fails(idx: int) -> bool:
    """Trial ``idx`` raises once at iteration ``FAIL_AT``."""
    return idx % 10 == 3


def fails_restore(idx: int) -> bool:
    """Trial ``idx`` also fails its first restore."""
    return idx % 20 == 3


def _trainable() -> type:
    from ray import tune

    class Busy(tune.Trainable):  # type: ignore[misc]
        """Fast iterations, a checkpoint after each; some trials fail (see the module)."""

        def setup(self, config: dict[str, Any]) -> None:
            self.ctl = Path(config["ctl"])
            self.idx = config["idx"]
            self.i = 0

        def step(self) -> dict[str, Any]:
            self.i += 1
            if fails(self.idx) and self.i == FAIL_AT and _touch_once(
                self.ctl / f"fail-{self.idx}"
            ):
                raise ValueError(f"trial {self.idx}: loss is nan at iteration {self.i}")
            return {"score": self.i * self.idx, "done": self.i >= ITERS}

        def save_checkpoint(self, checkpoint_dir: str) -> None:
            Path(checkpoint_dir, "state.json").write_text(json.dumps({"i": self.i}))

        def load_checkpoint(self, checkpoint_dir: str) -> None:
            if fails_restore(self.idx) and _touch_once(self.ctl / f"restore-fail-{self.idx}"):
                raise OSError(f"trial {self.idx}: checkpoint storage unavailable")
            self.i = json.loads(Path(checkpoint_dir, "state.json").read_text())["i"]

    return Busy


def _timed(callback: Any, calls: list[tuple[float, str]]) -> None:
    """Time every hook call of ``callback`` (seconds and hook name appended to ``calls``)."""
    clock = time.perf_counter
    for name in HOOKS:
        hook = getattr(callback, name, None)
        if hook is None:
            continue

        def wrapped(*args: Any, _hook: Callable[..., Any] = hook, _name: str = name,
                    **kwargs: Any) -> Any:
            start = clock()
            try:
                return _hook(*args, **kwargs)
            finally:
                calls.append((clock() - start, _name))

        setattr(callback, name, wrapped)


def _counter() -> Any:
    from ray import tune

    class Results(tune.Callback):  # type: ignore[misc]
        """Counts the results the driver processed."""

        def __init__(self) -> None:
            self.results = 0

        def on_trial_result(self, *args: Any, **kwargs: Any) -> None:
            self.results += 1

    return Results()


def one_run(ctx: Context, trials: int, with_callback: bool) -> dict[str, Any]:
    """One ``Tuner.fit()``: wall seconds, results, hook call times; checks the outcome."""
    from ray import tune

    from statemachine.tune import CheckpointConfig, EventLogCallback, FailureConfig, RunConfig

    run_dir = ctx.workdir / f"busy-{uuid.uuid4().hex[:8]}"
    ctl = run_dir / "ctl"
    ctl.mkdir(parents=True)
    url = f"sqlite:///{run_dir / 'log.db'}"
    calls: list[tuple[float, str]] = []
    counter = _counter()
    callbacks: list[Any] = [counter]
    callback = None
    if with_callback:
        callback = EventLogCallback(url)
        _timed(callback, calls)
        callbacks.append(callback)
    tuner = tune.Tuner(
        _trainable(),
        param_space={"ctl": str(ctl), "idx": tune.grid_search(list(range(trials)))},
        run_config=RunConfig(
            name="busy", storage_path=str(run_dir / "results"), verbose=0,
            callbacks=callbacks,
            failure_config=FailureConfig(max_failures=3),
            checkpoint_config=CheckpointConfig(checkpoint_frequency=1),
        ),
    )
    start = time.perf_counter()
    grid = tuner.fit()
    elapsed = time.perf_counter() - start
    expected = sum(1 for i in range(trials) if fails(i)) + sum(
        1 for i in range(trials) if fails_restore(i))

    def read(store: Any, experiment: str) -> tuple[int, int]:
        events = sum(e.events for e in store.list_experiments())
        checkpoints = sum(
            1 for row in store.read_fold_rows(experiment) if row[3] == "CheckpointSaved"
        )
        return events, checkpoints

    found = check_outcome(grid, trials, callback, url, expected, read)  # None: no callback
    events = 0
    if found is not None:
        events, checkpoints = found
        if checkpoints < trials * ITERS:
            raise AssertionError(f"{checkpoints} checkpoint events for {trials} x {ITERS}")
    return {"wall": elapsed, "results": counter.results, "calls": calls, "events": events}


def run(ctx: Context) -> None:
    """Measure and print the ``tune-busy`` tables."""
    trials = ctx.size(100, 6)
    rounds = max(1, min(ctx.rounds, 2)) if not ctx.quick else 1
    runs: dict[str, list[dict[str, Any]]] = {"without": [], "with": []}
    with local_ray(ctx, "tune-busy", "Busy Ray Tune driver") as available:
        if not available:
            return
        one_run(ctx, 4, with_callback=True)  # warm-up: workers, imports
        for r in range(rounds):
            order = ("without", "with") if r % 2 == 0 else ("with", "without")
            for variant in order:
                runs[variant].append(one_run(ctx, trials, with_callback=variant == "with"))
    wall = {k: Stat.of([r["wall"] for r in v]) for k, v in runs.items()}
    loop = {k: Stat.of([r["wall"] / r["results"] * 1e3 for r in v]) for k, v in runs.items()}
    ratio = wall["with"].median / wall["without"].median
    results = statistics.median(r["results"] for r in runs["with"])
    events = statistics.median(r["events"] for r in runs["with"])
    table = ctx.report.table(
        "tune-busy", f"Busy Ray Tune driver: {trials} trials x {ITERS} fast iterations, a "
        "checkpoint every iteration, failures and restores", "s")
    table.add("Tuner.fit() without the callback (baseline)", wall["without"])
    table.add("Tuner.fit() with EventLogCallback (SQLite, synchronous=FULL)", wall["with"],
              versus=wall["without"], target=f"<= {TARGET}x", ok=ratio <= TARGET,
              measured=f"{ratio:.3f}x")
    table.note(f"{rounds} run(s) of each variant after a warm-up, alternating; per run about "
               f"{results:,.0f} results through the driver and {events:,.0f} events in the log.")
    table.note("each run with the callback checked: every trial TERMINATED in the log, the "
               "failures counted exactly, a checkpoint event per checkpoint, nothing unwritten.")
    ctx.report.print_table(table)

    per = ctx.report.table("tune-busy", "Busy Ray Tune driver: the driver loop per result",
                           "ms")
    per.add("driver loop per result (fit wall time / results), without the callback "
            "(baseline)", loop["without"])
    per.add("driver loop per result, with EventLogCallback", loop["with"],
            versus=loop["without"])
    hooks = [r["calls"] for r in runs["with"]]
    per.add("time inside the callback's hooks, per result",
            Stat.of([sum(t for t, _ in c) / r["results"] * 1e3
                     for c, r in zip(hooks, runs["with"], strict=True)]),
            versus=loop["without"])
    every = sorted((t * 1e3, name) for c in hooks for t, name in c)
    if every:
        times = [t for t, _ in every]
        p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
        per.add("one hook call: median", Stat.of([statistics.median(times)]))
        per.add("one hook call: p99", Stat.of([p99]))
        longest, name = every[-1]
        per.add(f"one hook call: longest ({name})", Stat.of([longest]))
    per.note("ratio: over the baseline's loop time per result. Hook calls: every call of "
             "every timed hook (results, checkpoints, starts, failures, step ends) of all runs.")
    ctx.report.print_table(per)
