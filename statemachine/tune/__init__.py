"""The Ray Tune integration: ``from statemachine.tune import EventLogCallback``.

Ray is imported only in this package. Importing it checks that the installed Ray is a
supported 2.x version and raises :class:`~statemachine.tune.compat.UnsupportedRayError`
with the fix otherwise.
"""

from statemachine.tune.compat import UnsupportedRayError, check_ray

check_ray()

from statemachine.tune.callback import EventLogCallback  # noqa: E402

__all__ = ["EventLogCallback", "UnsupportedRayError"]
