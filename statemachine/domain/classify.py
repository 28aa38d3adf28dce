"""Map a raw exception and the phase it happened in to a typed trial failure.

Ray is imported only when the exception itself comes from Ray, so the pure core stays usable
(and fast to import) without Ray installed.
"""

from __future__ import annotations

import traceback as tb
from collections.abc import Iterable

from statemachine.domain.failures import (
    AbortError,
    ActorError,
    RestoreError,
    TrainingError,
    TrialError,
)
from statemachine.domain.status import Status

#: Exception types that never deserve a retry, whatever the policy says.
ALWAYS_FATAL = frozenset({"ray.tune.error._AbortTrialExecution"})


def qualified_name(cls: type) -> str:
    """``module.QualName`` of a class, the form recorded in ``TrialError.cause_type``."""
    return f"{cls.__module__}.{cls.__qualname__}"


def _type_names(exc: BaseException) -> set[str]:
    names: set[str] = set()
    for cls in type(exc).__mro__:
        names.add(qualified_name(cls))
        names.add(cls.__qualname__)
    return names


def _from_ray(exc: BaseException) -> bool:
    return any(cls.__module__.split(".", 1)[0] == "ray" for cls in type(exc).__mro__)


def _traceback_text(exc: BaseException) -> str:
    return "".join(tb.format_exception(type(exc), exc, exc.__traceback__))


def _unwrap_ray(exc: BaseException) -> tuple[BaseException, str | None, bool | None]:
    """Return (cause, traceback text from Ray or None, preempted flag if an actor death)."""
    from ray.exceptions import RayActorError, RayTaskError

    traceback_text: str | None = None
    if isinstance(exc, RayTaskError):
        # ``ray.get`` raises ``as_instanceof_cause()`` duals: their ``__getattr__`` forwards to
        # the cause, so ``traceback_str`` may be missing (AttributeError) rather than None
        # (their str() is the remote traceback that traceback_str held).
        traceback_text = getattr(exc, "traceback_str", None) or str(exc) or None
        cause = getattr(exc, "cause", None) or exc
        if isinstance(cause, RayActorError):
            return cause, traceback_text, bool(cause.preempted)
        return cause, traceback_text, None
    if isinstance(exc, RayActorError):
        return exc, None, bool(exc.preempted)
    return exc, None, None


def _carried_trial_error(cause: BaseException) -> TrialError | None:
    """A :class:`TrialError` that Ray carried, possibly through nested ``RayTaskError``s
    (a Ray Train worker's error reaches Tune through the trainer's actor)."""
    for _ in range(8):
        if isinstance(cause, TrialError):
            return cause
        inner = getattr(cause, "cause", None) if _from_ray(cause) else None
        if not isinstance(inner, BaseException):
            return None
        cause = inner
    return None


def classify(
    exc: BaseException, phase: Status, fatal_types: Iterable[str] = ()
) -> TrialError:
    """Map ``exc``, raised while the trial was in ``phase``, to a typed failure.

    Rules, in order: a :class:`TrialError` is returned as it is (also when Ray carried it
    from the trial's actor, wrapped in a ``RayTaskError``); an exception whose type (or
    any base, by short or qualified name) is listed in ``fatal_types`` or is Tune's
    ``_AbortTrialExecution`` becomes :class:`AbortError`; anything raised while ``RESTORING``
    is a :class:`RestoreError`; Ray's ``RayTaskError`` is unwrapped to its cause; a
    ``RayActorError`` becomes :class:`ActorError` with its ``preempted`` flag; anything else
    is a :class:`TrainingError`.
    """
    if isinstance(exc, TrialError) and not _from_ray(exc):
        return exc
    cause, ray_traceback, preempted = _unwrap_ray(exc) if _from_ray(exc) else (exc, None, None)
    carried = _carried_trial_error(cause)
    if carried is not None:
        # Typed in the trial's own process (``statemachine.tune.restoring``) and carried
        # through Ray: as it was raised, whatever Ray's phase (a plain copy, never a dual).
        return TrialError.from_dict(carried.to_dict())
    names = _type_names(exc) | _type_names(cause)
    cause_type = qualified_name(type(cause))
    message = str(cause)
    traceback_text = ray_traceback or _traceback_text(exc)
    fatal = set(fatal_types)
    if names & (fatal | ALWAYS_FATAL):
        return AbortError(cause_type, message, traceback_text)
    if phase is Status.RESTORING:
        return RestoreError(cause_type, message, traceback_text)
    if preempted is not None:
        return ActorError(cause_type, message, traceback_text, preempted=preempted)
    return TrainingError(cause_type, message, traceback_text)
