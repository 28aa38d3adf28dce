"""Which Ray versions this integration supports, and every difference between them.

The integration wraps DeveloperAPI methods of ``ray.tune.experiment.Trial`` and reads and
writes a few of its internals, all in :mod:`statemachine.tune.ray_surface`; those are stable
across Ray 2.x but not promised. ``.ci/run`` runs the Ray-facing tests on both ends of the
supported range: the newest Ray that ``pip`` resolves for ``ray[tune]>=2.40,<3`` and the
oldest supported one, :data:`MIN_RAY` (pinned as ``ray[tune]==2.40.0``).

Every version gate is here: the supported range (:func:`check_ray`), where the ``Tuner``'s
config classes live (:func:`tuner_config_classes`), whether placement groups take label
selectors (:func:`selector_support`) and whether Ray tells why an actor died
(:func:`death_cause_support`). This module imports from :mod:`.ray_surface`, never the
reverse, and imports Ray only inside its functions: a missing or unsupported Ray is refused
with the fix, not with an ``ImportError`` from deep inside Ray.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from statemachine.distribution import install_hint
from statemachine.exceptions import StateMachineError

if TYPE_CHECKING:
    from ray.tune import CheckpointConfig, FailureConfig, RunConfig

#: Lowest supported Ray version (inclusive) and first unsupported one (exclusive).
MIN_RAY = (2, 40)
MAX_RAY_EXCLUSIVE = (3, 0)
#: The Ray versions the test suite runs on (``.ci/run``): the oldest supported and the newest.
TESTED_RAY = ("2.40.0", "2.60.0")
#: The first Ray whose placement groups take per-bundle label selectors
#: (``RetryPolicy.avoid_failed_nodes``).
SELECTOR_MIN_RAY = (2, 49)


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
        from statemachine.tune.ray_surface.trial_methods import missing_trial_methods
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise UnsupportedRayError(
            f"ray {ray.__version__}: {exc}; statemachine.tune needs ray[tune] (tested with "
            f"{tested_text()}): {install_hint('ray')}"
        ) from None
    missing = missing_trial_methods()
    if missing:
        raise UnsupportedRayError(
            f"ray {ray.__version__}: ray.tune.experiment.Trial lacks {', '.join(missing)}; "
            f"statemachine.tune is tested with ray {tested_text()}"
        )


def tuner_config_classes() -> tuple[type[RunConfig], type[FailureConfig],
                                    type[CheckpointConfig]]:
    """``RunConfig``, ``FailureConfig``, ``CheckpointConfig`` from where the installed Ray wants
    them for a ``tune.Tuner``: ``ray.tune`` (Ray 2.60 warns when ``ray.train``'s are given),
    ``ray.train`` on Ray 2.40, which has them nowhere else."""
    try:
        from ray.tune import CheckpointConfig, FailureConfig, RunConfig
    except ImportError:
        from ray.train import (  # type: ignore[assignment]
            CheckpointConfig,
            FailureConfig,
            RunConfig,
        )
    return RunConfig, FailureConfig, CheckpointConfig


def selector_support(ray_version: str | None = None) -> str | None:
    """``None`` when this Ray (or a Ray of ``ray_version``) can place a trial away from given
    nodes; else why it cannot, naming the Ray version that is needed."""
    try:
        import ray

        from statemachine.tune.ray_surface.placement import placement_group_takes_selectors

        installed = ray_version or ray.__version__
        needed = ".".join(map(str, SELECTOR_MIN_RAY))
        if parse_version(installed) < SELECTOR_MIN_RAY:
            return (f"ray {installed} is installed, avoid_failed_nodes needs ray >= {needed} "
                    f"(pip install 'ray[tune]>={needed}')")
        if not placement_group_takes_selectors():
            return (f"ray {ray.__version__}'s placement_group() takes no bundle_label_selector "
                    f"(needs ray >= {needed})")
    except Exception as exc:  # an odd Ray: say so, never crash
        return f"cannot tell whether this Ray supports label selectors: {exc}"
    return None


def death_cause_support() -> str | None:
    """``None`` when this Ray tells why an actor died (its GCS records an ``ActorDeathCause``
    with the node's death: Ray 2.40 and 2.60 do); else why not: every actor death is then
    recorded with the cause ``unknown``."""
    try:
        import ray

        from statemachine.tune.ray_surface.deaths import has_node_death_info

        if not has_node_death_info():
            return (f"ray {ray.__version__} records no cause of an actor's death "
                    f"(ActorDeathCause with node_death_info; tested with {tested_text()})")
    except Exception as exc:  # an odd Ray: say so, never crash
        return f"cannot tell whether this Ray records why actors die: {exc}"
    return None
