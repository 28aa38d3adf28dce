"""The start-up of ``trial-replay``: wall and CPU time of a fresh process per command.

Standalone (not a section of the harness: it times whole processes, CPU included)::

    python -m benchmarks.startup
    python -m benchmarks.startup --compare /path/to/older/checkout --rounds 5

Each path (``import statemachine``, ``--version``, ``--help``, and ``experiments``,
``trials --status ERROR`` and ``show`` on a small SQLite log of 12 trials made here) runs as
``python -m statemachine.cli`` in a fresh interpreter; the wall time and the child's CPU time
(user + system) are the median of ``--rounds``. ``--compare DIR`` also runs every path with
the package found in ``DIR`` (a copy of an older checkout's ``statemachine/``: the figures
before a change), interleaved with this checkout's so that both see the same load.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def make_log(path: Path) -> None:
    """A small log: experiment ``exp``, 12 trials (9 ended, 3 running), no error."""
    from statemachine import (
        CheckpointSaved,
        RetryPolicy,
        TrialAdded,
        TrialCompleted,
        TrialStarted,
    )
    from statemachine.log import ExperimentLog

    with ExperimentLog.open(path, "exp", RetryPolicy(max_failures=2)) as log:
        for n in range(12):
            log.record(f"t{n}", TrialAdded(config={}))
            log.record(f"t{n}", TrialStarted())
            log.record(f"t{n}", CheckpointSaved(f"exp/t{n}/checkpoint_000000"))
            if n < 9:
                log.record(f"t{n}", TrialCompleted())


def paths(db: Path) -> dict[str, list[str]]:
    """Each path's command line (after the interpreter)."""
    cli = ["-m", "statemachine.cli"]
    return {
        "import statemachine": ["-c", "import statemachine"],
        "--version": [*cli, "--version"],
        "--help": [*cli, "--help"],
        "experiments": [*cli, "--db", str(db), "experiments"],
        "trials exp --status ERROR": [*cli, "--db", str(db), "trials", "exp", "--status",
                                      "ERROR"],
        "show exp t0": [*cli, "--db", str(db), "show", "exp", "t0"],
    }


def once(args: list[str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one fresh interpreter running ``args`` in ``cwd``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "120"})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    """Print the table: median wall and CPU per path (and per checkout with ``--compare``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--compare", type=Path, help="a folder holding an older statemachine/")
    options = parser.parse_args()
    trees = {"this": REPO}
    if options.compare is not None:
        trees = {"before": options.compare.resolve(), "after": REPO}
    with tempfile.TemporaryDirectory() as scratch:
        db = Path(scratch) / "small.db"
        make_log(db)
        chosen = paths(db)
        walls: dict[tuple[str, str], list[float]] = {}
        cpus: dict[tuple[str, str], list[float]] = {}
        loads = []
        for r in range(options.rounds):
            for name, args in chosen.items():
                order = list(trees.items())
                for tree, cwd in order if r % 2 else order[::-1]:
                    wall, cpu = once(args, cwd)
                    walls.setdefault((name, tree), []).append(wall)
                    cpus.setdefault((name, tree), []).append(cpu)
            loads.append(os.getloadavg()[0])
    print(f"{options.rounds} rounds, load average {min(loads):.1f} - {max(loads):.1f}")
    print("| path | " + " | ".join(f"wall {t}" for t in trees) + " | "
          + " | ".join(f"CPU {t}" for t in trees) + " |")
    print("|---|" + "---:|" * (2 * len(trees)))
    for name in chosen:
        cells = [f"{statistics.median(walls[name, t]):.2f} s" for t in trees]
        cells += [f"{statistics.median(cpus[name, t]):.2f} s" for t in trees]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
