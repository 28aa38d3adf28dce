"""Typed trial failures: what part of a trial failed, and why.

Each failure carries the original exception's qualified type name, its message and its
traceback text: plain strings that serialise to JSON, never a pickled object, so a log written
by one Python process can be read by any other.
"""

from __future__ import annotations

from typing import Any, ClassVar

from statemachine.domain.death import PREEMPTED_DEATH, UNKNOWN_DEATH, ActorDeath, DeathCause
from statemachine.exceptions import EventDecodeError


class TrialError(Exception):
    """Base class of the typed failures of a trial.

    Attributes:
        cause_type: qualified type name of the original exception, e.g. ``builtins.OSError``.
        message: ``str()`` of the original exception.
        traceback: formatted traceback text of the original exception ("" if unknown).
    """

    kind: ClassVar[str] = "TrialError"
    #: Whether a policy may retry after this failure (``AbortError`` never is).
    retryable: ClassVar[bool] = True

    def __init__(self, cause_type: str, message: str, traceback: str = "") -> None:
        super().__init__(f"{cause_type}: {message}" if message else cause_type)
        self.cause_type = cause_type
        self.message = message
        self.traceback = traceback

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of this failure."""
        return {
            "kind": self.kind,
            "cause_type": self.cause_type,
            "message": self.message,
            "traceback": self.traceback,
        }

    @staticmethod
    def from_dict(data: dict[str, Any]) -> TrialError:
        """Rebuild a failure from :meth:`to_dict` output."""
        try:
            cls = FAILURE_KINDS[data["kind"]]
            cause_type, message = data["cause_type"], data["message"]
            traceback = data.get("traceback", "")
            if not (
                isinstance(cause_type, str)
                and isinstance(message, str)
                and isinstance(traceback, str)
            ):
                raise TypeError("cause_type, message and traceback must be strings")
            if cls is ActorError:
                return ActorError._from_dict(cause_type, message, traceback, data)
            return cls(cause_type, message, traceback)
        except (KeyError, TypeError, ValueError) as exc:
            raise EventDecodeError(
                f"invalid failure record {data!r}: missing, unknown or mistyped field {exc}"
            ) from None

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash((self.kind, self.cause_type, self.message))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.cause_type!r}, {self.message!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (TrialError.from_dict, (self.to_dict(),))


class RestoreError(TrialError):
    """The trial failed while restoring from a checkpoint (whatever the cause)."""

    kind = "RestoreError"


class TrainingError(TrialError):
    """The user's training code raised while the trial was running."""

    kind = "TrainingError"


class ActorError(TrialError):
    """The trial's actor or its node died; ``death`` says why, as far as Ray told.

    ``death.cause`` is one of :class:`~statemachine.domain.death.DeathCause` (``unknown``
    when Ray gave none); ``preempted`` is Ray's ``RayActorError.preempted``, true exactly when
    the cause is ``preempted``. ``ActorError(..., preempted=True)`` alone is a preemption Ray
    said nothing more about.
    """

    kind = "ActorError"

    def __init__(
        self,
        cause_type: str,
        message: str,
        traceback: str = "",
        *,
        preempted: bool = False,
        death: ActorDeath | None = None,
    ) -> None:
        super().__init__(cause_type, message, traceback)
        if death is None:
            death = PREEMPTED_DEATH if preempted else UNKNOWN_DEATH
        elif preempted and death.cause is not DeathCause.PREEMPTED:
            raise ValueError(f"preempted contradicts the cause {death.cause.value!r}")
        self.death = death

    @property
    def preempted(self) -> bool:
        """Whether the actor's node was preempted (Ray's ``RayActorError.preempted``)."""
        return self.death.cause is DeathCause.PREEMPTED

    @property
    def cause(self) -> DeathCause:
        """Why the actor died (``unknown``: Ray gave no cause)."""
        return self.death.cause

    def with_death(self, death: ActorDeath) -> ActorError:
        """This failure with ``death`` learned later (the amendment of a cause)."""
        return ActorError(self.cause_type, self.message, self.traceback, death=death)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of this failure, with ``preempted`` and the death's fields."""
        return {**super().to_dict(), "preempted": self.preempted, **self.death.to_dict()}

    @staticmethod
    def _from_dict(
        cause_type: str, message: str, traceback: str, data: dict[str, Any]
    ) -> ActorError:
        """An actor failure from its JSON form; one written before causes were recorded
        (``TrialFailed`` version 1 or 2) has only ``preempted``: ``preempted`` or ``unknown``."""
        preempted = data["preempted"]
        if not isinstance(preempted, bool):
            raise TypeError("preempted must be true or false")
        death = None
        if "cause" in data:
            death = ActorDeath.from_dict({k: data[k] for k in ("cause", "ray_reason",
                                                                "node_message") if k in data})
        return ActorError(cause_type, message, traceback, preempted=preempted, death=death)

    def __repr__(self) -> str:
        return (f"ActorError({self.cause_type!r}, {self.message!r}, "
                f"cause={self.death.cause.value})")


class AbortError(TrialError):
    """A failure that must not be retried (invalid trainable, a type listed as fatal)."""

    kind = "AbortError"
    retryable = False


FAILURE_KINDS: dict[str, type[TrialError]] = {
    cls.kind: cls for cls in (RestoreError, TrainingError, ActorError, AbortError)
}
