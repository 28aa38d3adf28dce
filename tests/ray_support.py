"""The one way tests start a real Ray: ``ray.init(num_cpus=2)``, always shut down."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def running_ray(pythonpath: str) -> Iterator[None]:
    """A local Ray with 2 CPUs whose workers import from ``pythonpath``; shut down on exit."""
    import ray

    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = pythonpath
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
