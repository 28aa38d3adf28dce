"""Which Ray versions this integration supports, and a clear refusal of the others.

The integration wraps DeveloperAPI methods of ``ray.tune.experiment.Trial`` and reads a few of
its attributes; those are stable across Ray 2.x but not promised. It is tested against the
version pinned in ``setup.cfg`` (2.60 today) and accepts the 2.x range declared there.
"""

from __future__ import annotations

import re

from statemachine.exceptions import StateMachineError

#: Lowest supported Ray version (inclusive) and first unsupported one (exclusive).
MIN_RAY = (2, 40)
MAX_RAY_EXCLUSIVE = (3, 0)
TESTED_RAY = "2.60"

#: What the error seam touches on ``Trial``; a Ray without them cannot be supported.
TRIAL_METHODS = ("handle_error", "on_restore", "set_status", "should_recover")


class UnsupportedRayError(StateMachineError, ImportError):
    """The installed Ray is outside the supported range or lacks what the seam needs."""


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
            f"statemachine.tune supports ray[tune] >= {low}, < 3 (tested with {TESTED_RAY}); "
            f"ray {text} is installed: install a supported version, e.g. "
            f"pip install 'ray[tune]>={low},<3'"
        )


def check_ray() -> None:
    """Check the installed Ray: its version and the ``Trial`` methods the seam wraps."""
    try:
        import ray
        from ray.tune.experiment import Trial
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise UnsupportedRayError(
            f"statemachine.tune needs ray[tune]: pip install 'statemachine[ray]' ({exc})"
        ) from None
    check_version(ray.__version__)
    missing = [name for name in TRIAL_METHODS if not callable(getattr(Trial, name, None))]
    if missing:
        raise UnsupportedRayError(
            f"ray {ray.__version__}: ray.tune.experiment.Trial lacks {', '.join(missing)}; "
            f"statemachine.tune is tested with ray {TESTED_RAY}"
        )
