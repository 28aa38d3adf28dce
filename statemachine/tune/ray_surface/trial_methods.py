"""The four ``Trial`` methods wrapped in place, so Tune's hidden steps reach the callback.

Tune's callback hooks never see a failure's exception, ``is_restoring`` is cleared before
``on_trial_error`` runs and a successful restore has no hook, so :func:`wrap_trial_methods`
wraps ``handle_error(exc=None)``, ``on_restore()``, ``set_status(status)`` and
``should_recover()`` of ``ray.tune.experiment.Trial`` (DeveloperAPI) once per process. Each
wrapper runs Ray's original first and returns its result (``should_recover``: unless the
hooks answer). :mod:`statemachine.tune.seam` routes the reports to the run's callback; which
Ray versions have these methods is checked by :func:`statemachine.tune.compat.check_ray`
(through :func:`missing_trial_methods`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Protocol

from ray.tune.experiment import Trial

from statemachine.tune.ray_surface.trials import is_restoring

__all__ = [
    "SEAM_METHODS",
    "TrialMethodHooks",
    "missing_trial_methods",
    "trial_methods_wrapped",
    "wrap_trial_methods",
]

#: The ``Trial`` methods the seam wraps; a Ray without them cannot be supported.
SEAM_METHODS = ("handle_error", "on_restore", "set_status", "should_recover")

_WRAPPED_MARK = "__statemachine_seam__"


class TrialMethodHooks(Protocol):
    """What the wrapped ``Trial`` methods report, right after Ray's original ran."""

    def failed(self, trial: Trial, exc: BaseException | None, restoring: bool) -> None:
        """``handle_error`` ran; ``restoring``: the trial was restoring when it failed."""

    def restored(self, trial: Trial) -> None:
        """``on_restore`` ran: the restore succeeded."""

    def status_changed(self, trial: Trial, old: str | None, new: str) -> None:
        """``set_status`` changed the status from ``old`` to ``new``."""

    def recover_decision(self, trial: Trial) -> bool | None:
        """The answer ``should_recover`` returns instead of Ray's, or ``None`` for Ray's."""


def _wrap_handle_error(original: Callable[..., Any],
                       hooks: TrialMethodHooks) -> Callable[..., Any]:
    @functools.wraps(original)
    def handle_error(self: Trial, exc: BaseException | None = None, *args: Any,
                     **kw: Any) -> Any:
        restoring = is_restoring(self)  # Ray's handle_error clears it
        result = original(self, exc, *args, **kw)
        hooks.failed(self, exc, restoring)
        return result

    return handle_error


def _wrap_on_restore(original: Callable[..., Any],
                     hooks: TrialMethodHooks) -> Callable[..., Any]:
    @functools.wraps(original)
    def on_restore(self: Trial, *args: Any, **kw: Any) -> Any:
        result = original(self, *args, **kw)
        hooks.restored(self)
        return result

    return on_restore


def _wrap_set_status(original: Callable[..., Any],
                     hooks: TrialMethodHooks) -> Callable[..., Any]:
    @functools.wraps(original)
    def set_status(self: Trial, new: str, *args: Any, **kw: Any) -> Any:
        old = getattr(self, "status", None)
        result = original(self, new, *args, **kw)
        if old != new:
            hooks.status_changed(self, old, new)
        return result

    return set_status


def _wrap_should_recover(original: Callable[..., Any],
                         hooks: TrialMethodHooks) -> Callable[..., Any]:
    @functools.wraps(original)
    def should_recover(self: Trial, *args: Any, **kw: Any) -> Any:
        ray_says = original(self, *args, **kw)
        ours = hooks.recover_decision(self)
        return ray_says if ours is None else ours

    return should_recover


_WRAPPERS: dict[str, Callable[[Callable[..., Any], TrialMethodHooks], Callable[..., Any]]] = {
    "handle_error": _wrap_handle_error,
    "on_restore": _wrap_on_restore,
    "set_status": _wrap_set_status,
    "should_recover": _wrap_should_recover,
}


def wrap_trial_methods(hooks: TrialMethodHooks, trial_cls: type | None = None) -> None:
    """Wrap the :data:`SEAM_METHODS` of ``Trial`` to report to ``hooks`` (once; idempotent).

    Each wrapper runs Ray's original first and returns its result (``should_recover``:
    unless ``hooks`` answers); ``hooks`` must not raise.
    """
    cls = Trial if trial_cls is None else trial_cls
    for name, wrap in _WRAPPERS.items():
        current = cls.__dict__.get(name)
        if current is None or getattr(current, _WRAPPED_MARK, False):
            continue
        wrapped = wrap(current, hooks)
        setattr(wrapped, _WRAPPED_MARK, True)
        setattr(cls, name, wrapped)


def trial_methods_wrapped(trial_cls: type | None = None) -> bool:
    """Whether every one of the :data:`SEAM_METHODS` of ``Trial`` is wrapped."""
    cls = Trial if trial_cls is None else trial_cls
    return all(getattr(cls.__dict__.get(name), _WRAPPED_MARK, False) for name in SEAM_METHODS)


def missing_trial_methods() -> list[str]:
    """The :data:`SEAM_METHODS` the installed Ray's ``Trial`` lacks (empty when supported)."""
    return [name for name in SEAM_METHODS if not callable(getattr(Trial, name, None))]
