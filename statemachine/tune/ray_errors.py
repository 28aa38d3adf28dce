"""What a Ray exception carries: unwrap Ray's wrappers for the domain's classification rules.

A trial's failure reaches the driver wrapped: a ``RayTaskError`` (or its dual, the
``as_instanceof_cause()`` type ``ray.get`` raises) around the user's exception, a
``RayActorError`` for an actor that died (``preempted`` when its node was drained), possibly
nested (a Ray Train worker's error comes through the trainer's actor). :func:`unwrap` reads
that into a :class:`~statemachine.domain.classify.Raised`; the rules stay in
:func:`statemachine.domain.classify.classify_raised`, their one owner.

Only public names of ``ray.exceptions`` are read here (``RayTaskError.cause``,
``.traceback_str``, ``RayActorError.preempted``).
"""

from __future__ import annotations

from collections.abc import Iterable

from ray.exceptions import RayActorError, RayTaskError

from statemachine.domain.classify import Raised, classify, classify_raised
from statemachine.domain.failures import TrialError
from statemachine.domain.status import Status

#: How deep nested ``RayTaskError``s are searched for a carried typed failure.
_NESTING = 8


def _from_ray(exc: BaseException) -> bool:
    return any(cls.__module__.split(".", 1)[0] == "ray" for cls in type(exc).__mro__)


def _carried_trial_error(cause: BaseException) -> TrialError | None:
    """A :class:`TrialError` that Ray carried, possibly through nested ``RayTaskError``s."""
    for _ in range(_NESTING):
        if isinstance(cause, TrialError):
            return cause
        inner = getattr(cause, "cause", None) if _from_ray(cause) else None
        if not isinstance(inner, BaseException):
            return None
        cause = inner
    return None


def unwrap(exc: BaseException) -> Raised:
    """``exc``, an exception of Ray's, as the classification rules read it (wrappers off)."""
    cause: BaseException = exc
    traceback_text: str | None = None
    preempted: bool | None = None
    if isinstance(exc, RayTaskError):
        # ``ray.get`` raises ``as_instanceof_cause()`` duals: their ``__getattr__`` forwards to
        # the cause, so ``traceback_str`` may be missing (AttributeError) rather than None
        # (their str() is the remote traceback that traceback_str held).
        traceback_text = getattr(exc, "traceback_str", None) or str(exc) or None
        cause = getattr(exc, "cause", None) or exc
        if isinstance(cause, RayActorError):
            preempted = bool(cause.preempted)
    elif isinstance(exc, RayActorError):
        preempted = bool(exc.preempted)
    return Raised(exc, cause, traceback_text, preempted, _carried_trial_error(cause))


def classify_ray(
    exc: BaseException, phase: Status, fatal_types: Iterable[str] = ()
) -> TrialError:
    """The typed failure of ``exc`` as Tune reported it (``Trial.handle_error``) in ``phase``.

    An exception not of Ray's is classified as it was raised
    (:func:`statemachine.domain.classify.classify`).
    """
    if not _from_ray(exc):
        return classify(exc, phase, fatal_types)
    return classify_raised(unwrap(exc), phase, fatal_types)
