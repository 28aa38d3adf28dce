"""Peak memory of ``trial-replay import`` of a large export (issue 16, item 4).

Standalone (not a section of the harness: it measures memory, not time)::

    python -m benchmarks.import_memory --mb 100
    python -m benchmarks.import_memory --mb 100 --compare /path/to/older/checkout

A real experiment is recorded (a failure, a restore retry, checkpoints), exported, and its
trials are repeated under new ids (with new event ids and a padded config) until the file
holds ``--mb`` megabytes. Each import runs in a fresh process; its peak RSS
(``ru_maxrss`` of the child) is printed beside the baseline measured in the same run: the
same interpreter importing the CLI and doing nothing. ``--compare DIR`` also imports the
file with the package found in ``DIR`` (an older checkout: the figure before the change).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def make_export(folder: Path, megabytes: int) -> tuple[Path, int]:
    """An export file of about ``megabytes`` MB; returns it and its event count."""
    from statemachine import (
        CheckpointSaved,
        RestoreSucceeded,
        RetryPolicy,
        TrainingError,
        TrialAdded,
        TrialCompleted,
        TrialFailed,
        TrialStarted,
    )
    from statemachine.log import EventStore, ExperimentLog, export_records

    source = folder / "source.db"
    with ExperimentLog.open(source, "big", RetryPolicy(max_failures=2)) as log:
        log.record("t", TrialAdded(config={"pad": "x" * 2000}))
        log.record("t", TrialStarted())
        log.record("t", CheckpointSaved("big/t/checkpoint_0"))
        log.record("t", TrialFailed(error=TrainingError("builtins.ValueError", "boom")))
        log.record("t", TrialStarted(restore_from="big/t/checkpoint_0"))
        log.record("t", RestoreSucceeded())
        log.record("t", TrialCompleted())
    with EventStore.open(source, create=False) as store:
        lines = list(export_records(store, "big", print))
    head = [r for r in lines if r["kind"] != "event"]
    trial = [r for r in lines if r["kind"] == "event"]
    target = folder / "big.jsonl"
    events = 0
    with target.open("w", encoding="utf-8") as out:
        for r in head:
            out.write(json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n")
        n = 0
        while out.tell() < megabytes * 1_000_000:
            for r in trial:
                copy = dict(r, trial_id=f"t{n}", event_id=f"{n}-{r['event_id']}"[:64])
                out.write(json.dumps(copy, sort_keys=True, separators=(",", ":")) + "\n")
                events += 1
            n += 1
    return target, events


def peak_rss_mb(argv: list[str], pythonpath: str) -> float:
    """The peak RSS (MB) of a child process running ``argv``."""
    env = dict(os.environ, PYTHONPATH=pythonpath)
    code = ("import resource, sys; "
            "from statemachine.cli import main; rc = main(sys.argv[2:]); "
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss); sys.exit(rc)")
    done = subprocess.run([sys.executable, "-c", code, "trial-replay", *argv], env=env,
                          capture_output=True, text=True, check=False, cwd="/")
    if done.returncode != 0:
        raise SystemExit(f"{argv} failed: {done.stderr.strip()}")
    return int(done.stdout.strip().splitlines()[-1]) / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=100, help="size of the export (MB)")
    parser.add_argument("--compare", type=Path, help="an older checkout to import with too")
    args = parser.parse_args()
    _ = resource  # the children measure themselves
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        export, events = make_export(folder, args.mb)
        size = export.stat().st_size / 1e6
        print(f"export: {size:.0f} MB, {events} events")
        baseline = peak_rss_mb(["--help"], str(REPO))
        print(f"baseline (the CLI imported, --help): {baseline:.0f} MB peak RSS")
        trees = [("this checkout", REPO)]
        if args.compare is not None:
            trees.insert(0, (f"compare {args.compare}", args.compare.resolve()))
        for label, tree in trees:
            target = folder / f"{abs(hash(label))}.db"
            peak = peak_rss_mb(["--db", str(target), "import", str(export)], str(tree))
            print(f"{label}: import peak RSS {peak:.0f} MB ({peak - baseline:.0f} MB above "
                  f"the baseline, {peak / baseline:.1f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
