"""Typed trial failures: what part of a trial failed, and why.

Each failure carries the original exception's qualified type name, its message and its
traceback text: plain strings that serialise to JSON, never a pickled object, so a log written
by one Python process can be read by any other.
"""

from __future__ import annotations

from typing import Any, ClassVar

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
                if not isinstance(data["preempted"], bool):
                    raise TypeError("preempted must be true or false")
                return ActorError(cause_type, message, traceback, preempted=data["preempted"])
            return cls(cause_type, message, traceback)
        except (KeyError, TypeError) as exc:
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
    """The trial's actor or its node died while running; ``preempted`` if the node was preempted."""

    kind = "ActorError"

    def __init__(
        self, cause_type: str, message: str, traceback: str = "", *, preempted: bool = False
    ) -> None:
        super().__init__(cause_type, message, traceback)
        self.preempted = preempted

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of this failure, with the ``preempted`` flag."""
        return {**super().to_dict(), "preempted": self.preempted}

    def __repr__(self) -> str:
        return f"ActorError({self.cause_type!r}, {self.message!r}, preempted={self.preempted})"


class AbortError(TrialError):
    """A failure that must not be retried (invalid trainable, a type listed as fatal)."""

    kind = "AbortError"
    retryable = False


FAILURE_KINDS: dict[str, type[TrialError]] = {
    cls.kind: cls for cls in (RestoreError, TrainingError, ActorError, AbortError)
}
