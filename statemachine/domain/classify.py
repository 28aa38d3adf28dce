"""Map a raised exception and the phase it happened in to a typed trial failure.

The rules (:func:`classify_raised`) read a :class:`Raised`: the exception as raised and, when a
runtime wrapped it (Ray's ``RayTaskError``), what the wrapper carried. This module knows no
runtime: unwrapping Ray's exceptions is :mod:`statemachine.tune.ray_errors`, which hands the
same rules a filled-in :class:`Raised`. :func:`classify` is for an exception raised in this
process, as it was raised.
"""

from __future__ import annotations

import traceback as tb
from collections.abc import Iterable
from dataclasses import dataclass

from statemachine.domain.death import PREEMPTED_DEATH, UNKNOWN_DEATH, ActorDeath
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


@dataclass(frozen=True, slots=True)
class Raised:
    """An exception as the classification rules read it.

    Attributes:
        exception: what was raised (its type's names count for the fatal rule too).
        cause: the exception a runtime's wrapper carried (``exception`` when not wrapped).
        traceback: the traceback text the wrapper carried (``None``: formatted from
            ``exception``).
        preempted: for an actor that died, whether its node was preempted (``None``: not an
            actor death, unless ``death`` says it is).
        carried: a typed failure raised in the trial's own process and carried as it was
            (``statemachine.tune.restoring()``), taken whatever the phase.
        death: for an actor that died, why, as far as Ray told
            (:mod:`statemachine.domain.ray_causes` reads it from Ray's words); ``None``: not
            known here (an actor death with only ``preempted`` is ``preempted`` or
            ``unknown``). Ray raises some actor deaths as errors of their own
            (``OutOfMemoryError``): a ``death`` makes them actor failures too.
    """

    exception: BaseException
    cause: BaseException
    traceback: str | None = None
    preempted: bool | None = None
    carried: TrialError | None = None
    death: ActorDeath | None = None

    def actor_death(self) -> ActorDeath | None:
        """The actor death this exception reports (``None``: not an actor death)."""
        if self.death is not None:
            return self.death
        if self.preempted is None:
            return None
        return PREEMPTED_DEATH if self.preempted else UNKNOWN_DEATH


def _type_names(exc: BaseException) -> set[str]:
    names: set[str] = set()
    for cls in type(exc).__mro__:
        names.add(qualified_name(cls))
        names.add(cls.__qualname__)
    return names


def _traceback_text(exc: BaseException) -> str:
    return "".join(tb.format_exception(type(exc), exc, exc.__traceback__))


def classify_raised(
    raised: Raised, phase: Status, fatal_types: Iterable[str] = ()
) -> TrialError:
    """The typed failure for ``raised`` in ``phase``: the rules, in order.

    A carried :class:`TrialError` is taken as it was raised (a plain copy); an exception whose
    type (or any base, by short or qualified name, of the exception or its cause) is listed in
    ``fatal_types`` or is Tune's ``_AbortTrialExecution`` becomes :class:`AbortError`;
    anything raised while ``RESTORING`` is a :class:`RestoreError`; an actor death becomes
    :class:`ActorError` with its death (cause, Ray's reason words, the node's message);
    anything else is a :class:`TrainingError`.
    """
    if raised.carried is not None:  # as it was raised: a plain copy, never a wrapper's dual
        return TrialError.from_dict(raised.carried.to_dict())
    cause = raised.cause
    names = _type_names(raised.exception) | _type_names(cause)
    cause_type = qualified_name(type(cause))
    message = str(cause)
    traceback_text = raised.traceback or _traceback_text(raised.exception)
    if names & (set(fatal_types) | ALWAYS_FATAL):
        return AbortError(cause_type, message, traceback_text)
    if phase is Status.RESTORING:
        return RestoreError(cause_type, message, traceback_text)
    death = raised.actor_death()
    if death is not None:
        return ActorError(cause_type, message, traceback_text, death=death)
    return TrainingError(cause_type, message, traceback_text)


def classify(
    exc: BaseException, phase: Status, fatal_types: Iterable[str] = ()
) -> TrialError:
    """Map ``exc``, raised in this process while the trial was in ``phase``, to a typed failure.

    The rules of :func:`classify_raised`, for an exception as it was raised (a
    :class:`TrialError` is returned as it is). An exception Ray carried from a trial's process
    is unwrapped first by :func:`statemachine.tune.ray_errors.classify_ray`.
    """
    if isinstance(exc, TrialError):
        return exc
    return classify_raised(Raised(exc, exc), phase, fatal_types)
