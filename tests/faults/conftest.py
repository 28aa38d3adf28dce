"""Fixtures of the fault scenarios: one real Ray per module, and the reliability report."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.faults.faultkit import REPORT_ENV, Figures, worker_pythonpath, write_figures
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
