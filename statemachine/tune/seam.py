"""The error seam: wrappers around four ``Trial`` methods that Tune callbacks cannot see into.

Tune's callback hooks never receive the exception of a failed trial, ``is_restoring`` is
already cleared when ``on_trial_error``/``on_trial_recover`` run, and ``on_trial_restore`` is
not called. So the seam wraps, once per process and idempotently:

- ``Trial.handle_error``: captures the exception and the phase, calls Ray's own accounting,
  then lets the listener record the typed failure and steer Ray's counters;
- ``Trial.on_restore``: a restore succeeded;
- ``Trial.set_status``: pauses, resumes and stops that have no callback hook;
- ``Trial.should_recover``: answers with the listener's decision when it made one.

The original method always runs and its result is returned; a listener that raises is logged
and ignored, so nothing escapes into Tune.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

logger = logging.getLogger(__name__)

_WRAPPED_MARK = "__statemachine_seam__"
_lock = threading.Lock()
_listeners: list[TrialListener] = []


class TrialListener(Protocol):
    """What the seam tells about a trial; implemented by the Tune callback."""

    def owns(self, trial: Any) -> bool:
        """Whether this listener records ``trial`` (one listener per Tune run)."""

    def trial_failed(self, trial: Any, exc: BaseException | None, restoring: bool) -> None:
        """Ray's ``handle_error`` ran for ``trial``; ``restoring`` is the phase it failed in."""

    def trial_restored(self, trial: Any) -> None:
        """``trial`` restored from its checkpoint."""

    def status_changed(self, trial: Any, old: str, new: str) -> None:
        """Ray set ``trial``'s status from ``old`` to ``new``."""

    def recover_decision(self, trial: Any) -> bool | None:
        """The listener's answer to ``should_recover`` after the last failure, or ``None``."""


def add_listener(listener: TrialListener) -> None:
    """Route the seam's notifications to ``listener`` (idempotent)."""
    with _lock:
        if not any(existing is listener for existing in _listeners):
            _listeners.append(listener)


def remove_listener(listener: TrialListener) -> None:
    """Stop routing notifications to ``listener``."""
    with _lock:
        _listeners[:] = [existing for existing in _listeners if existing is not listener]


def listener_for(trial: Any) -> TrialListener | None:
    """The listener that owns ``trial``, if any."""
    for listener in list(_listeners):
        try:
            if listener.owns(trial):
                return listener
        except Exception:  # a broken listener must not break Tune
            logger.exception("statemachine: listener %r failed to answer owns()", listener)
    return None


def _notify(what: str, call: Callable[[TrialListener], Any], trial: Any) -> Any:
    listener = listener_for(trial)
    if listener is None:
        return None
    try:
        return call(listener)
    except Exception:  # nothing may escape into Tune
        logger.exception("statemachine: recording %s of trial %s failed", what, trial)
        return None


def _is_restoring(trial: Any) -> bool:
    try:
        return bool(trial.is_restoring)
    except Exception:  # a half-built trial has no temporary state
        return False


def _wrap_handle_error(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def handle_error(self: Any, exc: BaseException | None = None, *args: Any, **kw: Any) -> Any:
        restoring = _is_restoring(self)
        result = original(self, exc, *args, **kw)
        _notify("the failure", lambda lst: lst.trial_failed(self, exc, restoring), self)
        return result

    return handle_error


def _wrap_on_restore(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def on_restore(self: Any, *args: Any, **kw: Any) -> Any:
        result = original(self, *args, **kw)
        _notify("the restore", lambda lst: lst.trial_restored(self), self)
        return result

    return on_restore


def _wrap_set_status(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def set_status(self: Any, status: str, *args: Any, **kw: Any) -> Any:
        old = getattr(self, "status", None)
        result = original(self, status, *args, **kw)
        if old != status:
            _notify(
                "a status change", lambda lst: lst.status_changed(self, old, status), self
            )
        return result

    return set_status


def _wrap_should_recover(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def should_recover(self: Any, *args: Any, **kw: Any) -> Any:
        ray_says = original(self, *args, **kw)
        ours = _notify("the recover decision", lambda lst: lst.recover_decision(self), self)
        return ray_says if ours is None else ours

    return should_recover


_WRAPPERS: dict[str, Callable[[Callable[..., Any]], Callable[..., Any]]] = {
    "handle_error": _wrap_handle_error,
    "on_restore": _wrap_on_restore,
    "set_status": _wrap_set_status,
    "should_recover": _wrap_should_recover,
}


def install(trial_cls: type | None = None) -> None:
    """Wrap the ``Trial`` methods once; calling it again changes nothing."""
    if trial_cls is None:
        from ray.tune.experiment import Trial

        trial_cls = Trial
    with _lock:
        for name, wrap in _WRAPPERS.items():
            current = trial_cls.__dict__.get(name)
            if current is None or getattr(current, _WRAPPED_MARK, False):
                continue
            wrapped = wrap(current)
            setattr(wrapped, _WRAPPED_MARK, True)
            setattr(trial_cls, name, wrapped)


def installed(trial_cls: type | None = None) -> bool:
    """Whether every seam method of ``Trial`` is wrapped."""
    if trial_cls is None:
        from ray.tune.experiment import Trial

        trial_cls = Trial
    return all(
        getattr(trial_cls.__dict__.get(name), _WRAPPED_MARK, False) for name in _WRAPPERS
    )
