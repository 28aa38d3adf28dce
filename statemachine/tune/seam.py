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
and ignored, so nothing escapes into Tune. The wrapping itself (which methods, their
signatures) lives with the rest of the Ray surface, in
:mod:`statemachine.tune.ray_surface.trial_methods`;
this module routes what the wrappers report to the listener that owns the trial.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from statemachine.tune.ray_surface import trial_methods

logger = logging.getLogger(__name__)

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

    def status_changed(self, trial: Any, old: str | None, new: str) -> None:
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


class _Router:
    """Reports from the wrapped ``Trial`` methods, routed to the listener owning the trial."""

    def failed(self, trial: Any, exc: BaseException | None, restoring: bool) -> None:
        _notify("the failure", lambda lst: lst.trial_failed(trial, exc, restoring), trial)

    def restored(self, trial: Any) -> None:
        _notify("the restore", lambda lst: lst.trial_restored(trial), trial)

    def status_changed(self, trial: Any, old: str | None, new: str) -> None:
        _notify("a status change", lambda lst: lst.status_changed(trial, old, new), trial)

    def recover_decision(self, trial: Any) -> bool | None:
        answer = _notify("the recover decision", lambda lst: lst.recover_decision(trial), trial)
        return None if answer is None else bool(answer)


_ROUTER = _Router()


def install(trial_cls: type | None = None) -> None:
    """Wrap the ``Trial`` methods once; calling it again changes nothing."""
    with _lock:
        trial_methods.wrap_trial_methods(_ROUTER, trial_cls)


def installed(trial_cls: type | None = None) -> bool:
    """Whether every seam method of ``Trial`` is wrapped."""
    return trial_methods.trial_methods_wrapped(trial_cls)
