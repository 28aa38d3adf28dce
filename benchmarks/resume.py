"""Section ``resume``: a driver crash and ``Tuner.restore``, with and without the callback.

The scenario of tests/tune/resume_crashes.py (issue 27): 4 trials x 8 iterations of 0.4 s
(2 at a time; 2 x 4 under ``--quick``), a checkpoint every iteration, the driver SIGKILLed
once after a seeded random number of executed iterations, then
``Tuner.restore(resume_errored=True)`` to the end. Per trainable (function, class) and round,
the same kill point for both variants (taking turns first): plain Ray (the baseline) and
``EventLogCallback()``. Figures: the iterations executed twice, the trial time they cost
(x the iteration's 0.4 s) and the restore driver's wall time (Ray's start-up included).
Every run is checked: the final ``ResultGrid`` is an uninterrupted run's; with the callback
no iteration was redone beyond those since each trial's last checkpoint in the log.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

from benchmarks.harness import Context, Stat

TESTS = Path(__file__).resolve().parents[1] / "tests" / "tune"
STEP_S = 0.4


def one_run(ctx: Context, kind: str, callback: str, seed: str, trials: int,
            iters: int) -> tuple[int, float]:
    """Iterations redone and the restore driver's seconds of one crash-and-resume run."""
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    from resume_crashes import Crashes

    tmp = ctx.workdir / f"resume-{uuid.uuid4().hex[:8]}"
    run = Crashes(tmp, str(tmp / "results"), trials, iters, STEP_S, callback=callback)
    total = trials * iters
    grid = run.run(kind, kills=1, seed=seed, first=(total // 3, total * 2 // 3))
    if grid != run.uninterrupted_grid():
        raise AssertionError(f"{kind}, callback {callback}: not an uninterrupted run's grid: "
                             f"{grid}")
    if callback == "1" and run.redone_beyond_checkpoints():
        raise AssertionError(f"{kind}: redone beyond the last checkpoints: "
                             f"{run.redone_beyond_checkpoints()}")
    return run.redone(), run.restore_s


def run(ctx: Context) -> None:
    """Measure and print the ``resume`` table."""
    try:
        import ray
    except ImportError:
        table = ctx.report.table("resume", "driver crash and resume", "iterations")
        table.skip("Ray", "ray[tune] is not installed: pip install -e '.[bench]'")
        ctx.report.print_table(table)
        return
    trials, iters = ctx.size(4, 2), ctx.size(8, 4)
    rounds = max(1, min(ctx.rounds, 3)) if not ctx.quick else 1
    variants = {"0": "plain Ray (baseline)", "1": "EventLogCallback()"}
    for kind in ("function", "class"):
        redone: dict[str, list[float]] = {v: [] for v in variants}
        wall: dict[str, list[float]] = {v: [] for v in variants}
        for r in range(rounds):
            order = ("0", "1") if r % 2 == 0 else ("1", "0")
            for variant in order:
                count, seconds = one_run(ctx, kind, variant, f"resume-{kind}-{r}", trials, iters)
                redone[variant].append(count)
                wall[variant].append(seconds)
        base, ours = Stat.of(redone["0"]), Stat.of(redone["1"])
        table = ctx.report.table(
            "resume", f"{kind} trainable, Ray {ray.__version__}: {trials} trials x {iters} "
            f"iterations of {STEP_S} s, one SIGKILL, then Tuner.restore", "iterations")
        table.add("iterations redone, plain Ray (baseline)", base)
        table.add("iterations redone, EventLogCallback()", ours, versus=base,
                  target="<= baseline", ok=ours.median <= base.median)
        table.add("trial time redone (s), plain Ray", base.scaled(STEP_S))
        table.add("trial time redone (s), EventLogCallback()", ours.scaled(STEP_S))
        saved = [(b - o) * STEP_S for b, o in zip(redone["0"], redone["1"], strict=True)]
        table.add("trial time saved per crash (s)", Stat.of(saved))
        table.add("restore driver wall (s), plain Ray", Stat.of(wall["0"]))
        table.add("restore driver wall (s), EventLogCallback()", Stat.of(wall["1"]),
                  versus=Stat.of(wall["0"]))
        table.note(f"{rounds} round(s), the variants taking turns on the same seeded kill "
                   "point; every run ended as an uninterrupted run (statuses, last "
                   "iteration, checkpoint); with the callback nothing was redone beyond each "
                   "trial's last checkpoint in the log. Wall times include Ray's start-up.")
        ctx.report.print_table(table)
