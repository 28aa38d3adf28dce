"""Fixtures of the fault scenarios: one real Ray per module, and the reliability report."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.faults.faultkit import REPORT_ENV, Figures, worker_pythonpath, write_figures


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    """``ray.init(num_cpus=2)`` shared by a test module, always shut down at its end."""
    import ray

    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = worker_pythonpath()
    ray.init(num_cpus=2, include_dashboard=False, address="local",
             configure_logging=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


@pytest.fixture
def reliability() -> Callable[[Figures], None]:
    """Record a scenario's figures in ``$STATEMACHINE_RELIABILITY_REPORT`` (when set)."""

    def record(figures: Figures) -> None:
        target = os.environ.get(REPORT_ENV, "").strip()
        if target:
            write_figures(Path(target), figures)

    return record
