"""Fixtures of the fault scenarios: one real Ray per module, and the reliability report."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.faults.faultkit import (
    REPORT_ENV,
    Figures,
    under_ci_or_skip,
    worker_pythonpath,
    write_figures,
)
from tests.ray_support import running_ray


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    """``ray.init(num_cpus=2)`` shared by a test module, always shut down at its end."""
    with running_ray(worker_pythonpath()):
        yield


@pytest.fixture
def reliability() -> Callable[[Figures], None]:
    """Record a scenario's figures in ``$STATEMACHINE_RELIABILITY_REPORT`` (when set)."""

    def record(figures: Figures) -> None:
        target = os.environ.get(REPORT_ENV, "").strip()
        if target:
            write_figures(Path(target), figures)

    return record


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs mounted for the test (skipped when mounting is not permitted)."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        under_ci_or_skip(f"cannot mount a tmpfs to fill: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
