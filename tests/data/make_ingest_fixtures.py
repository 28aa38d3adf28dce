"""Write ``tests/data/ingest/ray-<X.Y>/``: Ray experiment folders the ingest tests read.

Run from the repository root with the virtualenv of the Ray version to record (the tests
read both, so run it with each)::

    .venv/bin/python tests/data/make_ingest_fixtures.py
    .venv-ray-oldest/bin/python tests/data/make_ingest_fixtures.py

It makes the real runs of :mod:`tests.ingest.ingest_runs` without the callback and copies
what Ray wrote, as Ray wrote it, except the files an ingest never reads and that would only
weigh on the repository: pickles (``tuner.pkl``, ``params.pkl``, ``error.pkl``, the searcher
state ``basic-variant-state-*.json``) and TensorBoard event files. Each folder's Ray view
(``{trial_id: [status, num_failures]}`` from the ``ResultGrid``) is written beside it as
``<folder>.ray_view.json``:

- ``faults``: the class trainable's failures, restore retries and actor death;
- ``crash-at-kill``: the crash experiment as it was right after the driver's SIGKILL (no
  Ray view: nothing finished);
- ``crash``: the same experiment after ``Tuner.restore(..., resume_errored=True)``.

Checkpoint folders keep their content (a few bytes each). Git does not keep file times;
nothing the ingest of these folders records depends on them.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "ingest")]

import ray  # noqa: E402
from ingest_runs import run_crash, run_faults, worker_pythonpath  # noqa: E402

from tests.ray_support import running_ray  # noqa: E402

OUT = Path(__file__).with_name("ingest")
_DROPPED = ("*.pkl", "events.out.tfevents.*", "basic-variant-state-*.json")


def prune(folder: Path) -> None:
    """Remove what an ingest never reads (pickles, TensorBoard files)."""
    for pattern in _DROPPED:
        for path in folder.rglob(pattern):
            path.unlink()


def keep(source: Path, target: Path, view: dict[str, object] | None) -> None:
    """Copy ``source`` to ``target`` (replaced), pruned, with its Ray view beside it."""
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target)
    prune(target)
    if view is not None:
        target.with_name(f"{target.name}.ray_view.json").write_text(
            json.dumps(view, indent=2, sort_keys=True) + "\n")


def main() -> None:
    version = ".".join(ray.__version__.split(".")[:2])
    out = OUT / f"ray-{version}"
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ingest-fixtures-") as scratch:
        base = Path(scratch)
        with running_ray(worker_pythonpath()):
            view = run_faults(base / "results", base / "ctl-faults")
            keep(base / "results" / "faults", out / "faults", view)
            crash = run_crash(base / "crash",
                              between=lambda folder: keep(folder, out / "crash-at-kill", None))
            keep(crash.folder, out / "crash", crash.ray_view)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
