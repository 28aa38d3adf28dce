"""Fixtures of the Tune integration tests: a real Ray (2 CPUs) per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.ray_support import running_ray
from tests.tune.tunekit import worker_pythonpath


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    """``ray.init(num_cpus=2)`` for a test module, always shut down at its end."""
    with running_ray(worker_pythonpath()):
        yield
