"""Section ``tune``: the same Ray Tune experiment with and without ``EventLogCallback``.

8 trials (4 under ``--quick``) of a small class trainable on ``ray.init(num_cpus=2)``: each
trains ``ITERS`` iterations, checkpoints every 2; every other trial raises once mid-run
(counted failure, restored from its checkpoint), and every fourth also fails its first
restore attempt (a restore retry). ``FailureConfig(max_failures=3)``. Rounds alternate the
two variants; the figure is ``Tuner.fit()`` wall time. Each run with the callback is checked
after: every trial ended TERMINATED in Ray and in the log, nothing unwritten.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.harness import Context, Stat

ITERS = 8
TARGET = 1.05


def _touch_once(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def _trainable() -> type:
    from ray import tune

    class Flaky(tune.Trainable):  # type: ignore[misc]
        """Counts iterations; trial ``idx`` odd fails once at iteration 5, ``idx % 4 == 1``
        also fails its first restore."""

        def setup(self, config: dict[str, Any]) -> None:
            self.ctl = Path(config["ctl"])
            self.idx = config["idx"]
            self.i = 0

        def step(self) -> dict[str, Any]:
            self.i += 1
            if self.idx % 2 == 1 and self.i == 5 and _touch_once(self.ctl / f"fail-{self.idx}"):
                raise ValueError(f"trial {self.idx}: loss is nan at iteration {self.i}")
            time.sleep(0.05)
            return {"score": self.i * self.idx, "done": self.i >= ITERS}

        def save_checkpoint(self, checkpoint_dir: str) -> None:
            Path(checkpoint_dir, "state.json").write_text(json.dumps({"i": self.i}))

        def load_checkpoint(self, checkpoint_dir: str) -> None:
            if self.idx % 4 == 1 and _touch_once(self.ctl / f"restore-fail-{self.idx}"):
                raise OSError(f"trial {self.idx}: checkpoint storage unavailable")
            self.i = json.loads(Path(checkpoint_dir, "state.json").read_text())["i"]

    return Flaky


def one_run(ctx: Context, trials: int, with_callback: bool) -> float:
    """Seconds of ``Tuner.fit()``; checks the outcome."""
    from ray import tune

    from statemachine.tune import CheckpointConfig, EventLogCallback, FailureConfig, RunConfig

    run_dir = ctx.workdir / f"tune-{uuid.uuid4().hex[:8]}"
    ctl = run_dir / "ctl"
    ctl.mkdir(parents=True)
    url = f"sqlite:///{run_dir / 'log.db'}"
    callback = EventLogCallback(url) if with_callback else None
    tuner = tune.Tuner(
        _trainable(),
        param_space={"ctl": str(ctl), "idx": tune.grid_search(list(range(trials)))},
        run_config=RunConfig(
            name="bench", storage_path=str(run_dir / "results"), verbose=0,
            callbacks=[callback] if callback else [],
            failure_config=FailureConfig(max_failures=3),
            checkpoint_config=CheckpointConfig(checkpoint_frequency=2),
        ),
    )
    start = time.perf_counter()
    grid = tuner.fit()
    elapsed = time.perf_counter() - start
    expected = sum(1 for i in range(trials) if i % 2 == 1) + sum(
        1 for i in range(trials) if i % 4 == 1)
    check_outcome(grid, trials, callback, url, expected)
    return elapsed


def check_outcome(
    grid: Any, trials: int, callback: Any, url: str, expected_failures: int,
    read: Callable[[Any, str], Any] | None = None,
) -> Any:
    """Raise unless the run finished cleanly and, with the callback, the log agrees: nothing
    unwritten, every trial TERMINATED, ``expected_failures`` counted (Ray's default policy
    has no restore retry, so a failed restore counts too). Returns ``read(store, experiment)``
    on the log, if given."""
    from statemachine import EventStore, Status
    from statemachine.log import rehydrate

    errors = [r.error for r in grid if r.error]
    if errors or len(grid) != trials:
        raise AssertionError(f"the experiment did not finish cleanly: {errors[:1]}")
    if callback is None:
        return None
    if callback.events_unwritten or callback.hook_errors:
        raise AssertionError(f"callback summary: {callback.summary()}")
    with EventStore.open(url, create=False) as store:
        (experiment,) = [e.name for e in store.list_experiments()]
        states = rehydrate(store, experiment)
        extra = read(store, experiment) if read is not None else None
    ended = [s.status for s in states.values()]
    if len(ended) != trials or any(s is not Status.TERMINATED for s in ended):
        raise AssertionError(f"log states: {ended}")
    failures = sum(s.failures for s in states.values())
    if failures != expected_failures:
        raise AssertionError(f"expected {expected_failures} counted failures, log has {failures}")
    return extra


@contextmanager
def local_ray(ctx: Context, section: str, title: str) -> Iterator[bool]:
    """Ray on this machine for a Tune section (the checkout on the workers' ``PYTHONPATH``),
    shut down after; ``False`` (the section's table printed as skipped) without Ray."""
    try:
        import ray
    except ImportError:
        table = ctx.report.table(section, title, "s")
        table.skip("Ray", "ray[tune] is not installed: pip install -e '.[bench]'")
        ctx.report.print_table(table)
        yield False
        return
    repo = str(Path(__file__).resolve().parents[1])
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (repo, saved) if p)
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False,
             log_to_driver=False)
    try:
        yield True
    finally:
        ray.shutdown()
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def run(ctx: Context) -> None:
    """Measure and print the ``tune`` table."""
    trials = ctx.size(8, 4)
    rounds = max(1, min(ctx.rounds, 3)) if not ctx.quick else 1
    with local_ray(ctx, "tune", "Ray Tune driver") as available:
        if not available:
            return
        one_run(ctx, trials, with_callback=False)  # warm-up: workers, imports
        times: dict[str, list[float]] = {"without": [], "with": []}
        for r in range(rounds):
            order = ("without", "with") if r % 2 == 0 else ("with", "without")
            for variant in order:
                times[variant].append(one_run(ctx, trials, with_callback=variant == "with"))
    without, with_ = Stat.of(times["without"]), Stat.of(times["with"])
    ratio = with_.median / without.median
    table = ctx.report.table("tune", f"Ray Tune: {trials} trials x {ITERS} iterations with "
                             "failures and a restore retry, Tuner.fit() wall time", "s")
    table.add("without the callback (baseline)", without)
    table.add("with EventLogCallback (SQLite, synchronous=FULL)", with_, versus=without,
              target=f"<= {TARGET}x", ok=ratio <= TARGET, measured=f"{ratio:.3f}x")
    table.note(f"{rounds} run(s) each after a warm-up run, alternating; each run with the "
               "callback checked: every trial TERMINATED in the log, the failures counted, "
               "nothing unwritten.")
    ctx.report.print_table(table)
