"""The Ray Tune integration: ``from statemachine.tune import EventLogCallback``.

Ray is imported only in this package. Importing it checks that the installed Ray is a
supported 2.x version and raises :class:`~statemachine.tune.compat.UnsupportedRayError`
with the fix otherwise.

``RunConfig``, ``FailureConfig`` and ``CheckpointConfig`` are Ray's own classes, taken from
where the installed Ray wants them for a ``tune.Tuner`` (``ray.tune``; Ray 2.40 has them
only in ``ray.train``), so a driver written with them runs on every supported Ray.
"""

from typing import TYPE_CHECKING

from statemachine.tune.compat import UnsupportedRayError, check_ray, tuner_config_classes

check_ray()

from statemachine.tune.callback import EventLogCallback  # noqa: E402
from statemachine.tune.restoring import restoring  # noqa: E402

if TYPE_CHECKING:
    from ray.tune import CheckpointConfig, FailureConfig, RunConfig
else:
    RunConfig, FailureConfig, CheckpointConfig = tuner_config_classes()

__all__ = [
    "CheckpointConfig",
    "EventLogCallback",
    "FailureConfig",
    "RunConfig",
    "UnsupportedRayError",
    "restoring",
]
