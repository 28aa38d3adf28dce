"""Why a trial's actor died: a closed set of causes, and what Ray said about it.

A :class:`DeathCause` is one of a fixed set, named after Ray's own reasons (see
:mod:`statemachine.domain.ray_causes` for the mapping from Ray's words); ``unknown`` when Ray
gave no cause, never a guess. An :class:`ActorDeath` is the cause together with Ray's own
reason words and the node death's message, as an actor failure records it. A leaf of the
domain: it imports nothing of the others.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from statemachine.exceptions import EventDecodeError


class DeathCause(str, Enum):
    """Why an actor died, as far as Ray told (one of a closed set)."""

    PREEMPTED = "preempted"
    """Its node was drained for preemption and removed (Ray's ``preempted``)."""
    NODE_DIED = "node_died"
    """Its node died without being drained (an unexpected termination, or no reason given)."""
    NODE_TERMINATED = "node_terminated"
    """Its node was shut down on purpose (an expected termination)."""
    NODE_DRAINED_IDLE = "node_drained_idle"
    """Its node was drained by the autoscaler as idle."""
    OOM = "oom"
    """Its worker was killed by Ray's memory monitor (the node ran low on memory)."""
    WORKER_CRASHED = "worker_crashed"
    """Its worker process died (a crash, a signal) while the node stayed up."""
    KILLED = "killed"
    """It was killed with ``ray.kill``."""
    OWNER_DIED = "owner_died"
    """The process that owned it died."""
    OUT_OF_SCOPE = "out_of_scope"
    """Every reference to it was released."""
    CREATION_FAILED = "creation_failed"
    """Its creation task (the constructor) raised."""
    UNSCHEDULABLE = "unschedulable"
    """It could not be scheduled (no node can host it)."""
    RUNTIME_ENV_FAILED = "runtime_env_failed"
    """Its runtime environment could not be set up."""
    UNKNOWN = "unknown"
    """Ray gave no cause (not yet, or not at all)."""

    @property
    def words(self) -> str:
        """The cause as people read it (``node died``)."""
        return _WORDS[self]

    def __str__(self) -> str:
        return self.value


_WORDS = {
    DeathCause.PREEMPTED: "node preempted",
    DeathCause.NODE_DIED: "node died",
    DeathCause.NODE_TERMINATED: "node terminated on purpose",
    DeathCause.NODE_DRAINED_IDLE: "node drained as idle",
    DeathCause.OOM: "killed for lack of memory",
    DeathCause.WORKER_CRASHED: "worker process died",
    DeathCause.KILLED: "killed by ray.kill",
    DeathCause.OWNER_DIED: "owner died",
    DeathCause.OUT_OF_SCOPE: "released (no reference left)",
    DeathCause.CREATION_FAILED: "creation task failed",
    DeathCause.UNSCHEDULABLE: "could not be scheduled",
    DeathCause.RUNTIME_ENV_FAILED: "runtime environment setup failed",
    DeathCause.UNKNOWN: "cause unknown",
}
_CAUSE_BY_VALUE = {cause.value: cause for cause in DeathCause}
_ENUM_WORD = re.compile(r"^[A-Z][A-Z0-9_]*$")


def death_cause(value: object) -> DeathCause:
    """The cause named ``value`` (a :class:`DeathCause` or its value); ``ValueError`` if none."""
    if isinstance(value, DeathCause):
        return value
    cause = _CAUSE_BY_VALUE.get(value) if isinstance(value, str) else None
    if cause is None:
        raise ValueError(
            f"unknown actor death cause {value!r}; causes: {', '.join(_CAUSE_BY_VALUE)}"
        )
    return cause


_FIELDS = ("cause", "ray_reason", "node_message")


@dataclass(frozen=True, slots=True)
class ActorDeath:
    """Why an actor died: the cause, Ray's own reason words and the node death's message.

    Attributes:
        cause: the :class:`DeathCause` (``unknown``: Ray gave none).
        ray_reason: Ray's own words for the reason, most general first, joined by ``/``
            (``NODE_DIED/UNEXPECTED_TERMINATION``, ``WORKER_DIED``, ``oom_context``,
            ``OutOfMemoryError``); ``""`` when Ray said nothing.
        node_message: the node death's message (Ray's ``reason_message``, e.g. ``health
            check failed``); ``""`` when the node did not die or Ray gave none.
    """

    cause: DeathCause = DeathCause.UNKNOWN
    ray_reason: str = ""
    node_message: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "cause", death_cause(self.cause))
        for name in ("ray_reason", "node_message"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"{name} must be a string, got {getattr(self, name)!r}")

    @property
    def known(self) -> bool:
        """Whether Ray gave a cause."""
        return self.cause is not DeathCause.UNKNOWN

    def describe(self) -> str:
        """``node died (unexpected termination: health check failed)``: what a person reads."""
        last = self.ray_reason.rsplit("/", 1)[-1]
        detail = last.replace("_", " ").lower() if _ENUM_WORD.match(last) else last
        if detail == self.cause.words:
            detail = ""
        if self.node_message:
            detail = f"{detail}: {self.node_message}" if detail else self.node_message
        return f"{self.cause.words} ({detail})" if detail else self.cause.words

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of this death."""
        return {"cause": self.cause.value, "ray_reason": self.ray_reason,
                "node_message": self.node_message}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ActorDeath:
        """Rebuild a death from :meth:`to_dict` output; unknown keys or bad values refused."""
        unknown = set(data) - set(_FIELDS)
        if unknown:
            raise EventDecodeError(
                f"actor death has unknown field(s): {', '.join(sorted(map(str, unknown)))}")
        try:
            return cls(data.get("cause", DeathCause.UNKNOWN.value),
                       data.get("ray_reason", ""), data.get("node_message", ""))
        except ValueError as exc:
            raise EventDecodeError(f"invalid actor death {dict(data)!r}: {exc}") from None


#: The death of an actor of which Ray said nothing.
UNKNOWN_DEATH = ActorDeath()
#: The death Ray reports as ``RayActorError.preempted`` and nothing more.
PREEMPTED_DEATH = ActorDeath(DeathCause.PREEMPTED)
