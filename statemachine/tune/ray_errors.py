"""What a Ray exception carries: unwrap Ray's wrappers for the domain's classification rules.

A trial's failure reaches the driver wrapped: a ``RayTaskError`` (or its dual, the
``as_instanceof_cause()`` type ``ray.get`` raises) around the user's exception, a
``RayActorError`` for an actor that died (``preempted`` when its node was drained), possibly
nested (a Ray Train worker's error comes through the trainer's actor). :func:`unwrap` reads
that into a :class:`~statemachine.domain.classify.Raised`; the rules stay in
:func:`statemachine.domain.classify.classify_raised`, their one owner.

Why an actor died is read from the exception as raised (:func:`exception_death`): Ray builds
an ``ActorDiedError`` from the GCS's ``ActorDeathCause`` (its ``preempted`` from the node's
death reason, its message from the context's words), raises some deaths as errors of their
own (``OutOfMemoryError``, ``RuntimeEnvSetupError``, ``ActorUnschedulableError``) and an
``ActorUnavailableError`` with no cause at all; the words are mapped by
:func:`statemachine.domain.ray_causes.death_from_exception`. What the exception lacks is asked
of Ray later (:mod:`statemachine.tune.late_causes`).

Only public names of ``ray.exceptions`` are read here (``RayTaskError.cause``,
``.traceback_str``, ``RayActorError.preempted``, ``.actor_init_failed``, the exceptions'
types and ``str()``).
"""

from __future__ import annotations

from collections.abc import Iterable

from ray.exceptions import RayActorError, RayTaskError

from statemachine.domain.classify import Raised, classify, classify_raised, qualified_name
from statemachine.domain.death import ActorDeath
from statemachine.domain.failures import TrialError
from statemachine.domain.ray_causes import death_from_exception
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


def exception_death(exc: BaseException) -> ActorDeath | None:
    """Why the actor died, as ``exc`` (the exception a wrapper carried, or as raised) says;
    ``None`` when it is no actor death (``unknown`` when it is one Ray said nothing about)."""
    names = [qualified_name(cls) for cls in type(exc).__mro__]
    if isinstance(exc, RayActorError):
        return death_from_exception(names, preempted=bool(exc.preempted),
                                    actor_init_failed=bool(exc.actor_init_failed),
                                    message=str(exc))
    return death_from_exception(names)


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
    return Raised(exc, cause, traceback_text, preempted, _carried_trial_error(cause),
                  exception_death(cause))


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
