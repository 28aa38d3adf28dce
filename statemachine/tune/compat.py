"""Which Ray versions this integration supports, and a clear refusal of the others.

The integration wraps DeveloperAPI methods of ``ray.tune.experiment.Trial`` and reads and
writes a few of its internals, all in :mod:`statemachine.tune.ray_surface`; those are stable
across Ray 2.x but not promised. ``.ci/run`` runs the Ray-facing tests on both ends of the
supported range: the newest Ray that ``pip`` resolves for ``ray[tune]>=2.40,<3`` and the
oldest supported one, :data:`MIN_RAY` (pinned as ``ray[tune]==2.40.0``).
"""

from __future__ import annotations

import re

from statemachine.distribution import install_hint
from statemachine.exceptions import StateMachineError

#: Lowest supported Ray version (inclusive) and first unsupported one (exclusive).
MIN_RAY = (2, 40)
MAX_RAY_EXCLUSIVE = (3, 0)
#: The Ray versions the test suite runs on (``.ci/run``): the oldest supported and the newest.
TESTED_RAY = ("2.40.0", "2.60.0")


class UnsupportedRayError(StateMachineError, ImportError):
    """The installed Ray is outside the supported range or lacks what the seam needs."""


def tested_text() -> str:
    """``2.40.0 and 2.60.0``: the tested versions, for messages."""
    return " and ".join(TESTED_RAY)


def parse_version(text: str) -> tuple[int, int]:
    """``(major, minor)`` of a version string such as ``2.60.0`` or ``2.41.0rc1``."""
    match = re.match(r"^(\d+)\.(\d+)", text)
    if match is None:
        raise UnsupportedRayError(f"cannot read the Ray version {text!r}")
    return int(match.group(1)), int(match.group(2))


def check_version(text: str) -> None:
    """Raise :class:`UnsupportedRayError` unless ``text`` is a supported Ray version."""
    version = parse_version(text)
    if not MIN_RAY <= version < MAX_RAY_EXCLUSIVE:
        low = ".".join(map(str, MIN_RAY))
        raise UnsupportedRayError(
            f"statemachine.tune supports ray[tune] >= {low}, < 3 (tested with "
            f"{tested_text()}); ray {text} is installed: install a supported version, e.g. "
            f"pip install 'ray[tune]>={low},<3'"
        )


def check_ray() -> None:
    """Check the installed Ray: its version and the ``Trial`` methods the seam wraps."""
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise UnsupportedRayError(
            f"statemachine.tune needs ray[tune]: {install_hint('ray')} ({exc})"
        ) from None
    check_version(ray.__version__)
    try:
        from statemachine.tune import ray_surface
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise UnsupportedRayError(
            f"ray {ray.__version__}: {exc}; statemachine.tune needs ray[tune] (tested with "
            f"{tested_text()}): {install_hint('ray')}"
        ) from None
    missing = ray_surface.missing_trial_methods()
    if missing:
        raise UnsupportedRayError(
            f"ray {ray.__version__}: ray.tune.experiment.Trial lacks {', '.join(missing)}; "
            f"statemachine.tune is tested with ray {tested_text()}"
        )
