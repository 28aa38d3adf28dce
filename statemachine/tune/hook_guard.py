"""The guard every Tune hook of the callback runs in, and what a hook takes as Tune's trials.

An exception escaping a callback hook aborts the whole Tune run: :func:`never_raises` reports
it (logged, counted in ``hook_errors``) and returns ``None``. Tune's ``Callback`` signatures
allow every argument to be ``None`` or left out (Ray's own tests call
``on_trial_result(trial=None, result=None)``): :func:`tune_trials` is the trials of such a call.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

logger = logging.getLogger("statemachine.tune.callback")

__all__ = ["never_raises", "tune_trials"]

_F = TypeVar("_F", bound=Callable[..., Any])


def never_raises(method: _F) -> _F:
    """Report any exception of a hook instead of letting it abort the Tune run."""

    @functools.wraps(method)
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except Exception:  # an escaping exception aborts the whole run
            self.hook_errors += 1
            logger.exception("statemachine: %s failed; the run continues", method.__name__)
            return None

    return guarded  # type: ignore[return-value]


def tune_trials(trials: Any) -> list[Any]:
    """Tune's list of trials; ``None`` (Ray's own tests call hooks so) or anything that is not
    a list of trials is no trial at all."""
    return [t for t in trials if t is not None] if isinstance(trials, list | tuple) else []
