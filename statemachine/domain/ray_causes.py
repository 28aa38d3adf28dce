"""Ray's words for why an actor died, mapped to a :class:`~statemachine.domain.death.DeathCause`.

Pure data and the functions that read it; nothing here imports Ray. The Ray adapter reads
Ray's objects (through its surface module) into plain values and calls one of:

- :func:`death_from_exception`: the failure as raised (``RayActorError.preempted``,
  ``actor_init_failed``, the exception's type names and its message);
- :func:`death_from_state_api`: ``ray.util.state.get_actor(id, detail=True).death_cause``,
  the dict of Ray's ``ActorDeathCause`` message (snake_case keys, enum names);
- :func:`death_from_node_table`: ``ray.nodes()``' ``DeathReason`` / ``DeathReasonMessage`` of
  the node the actor ran on.

The tables name Ray's protobuf enums and context fields of ``src/ray/protobuf/common.proto``
(``ActorDeathCause``, ``ActorDiedErrorContext.Reason``, ``NodeDeathInfo.Reason``), the
exception types of ``ray.exceptions`` an actor death is raised as, and the sentences Ray's GCS
writes into an actor's death message (``gcs_actor_manager.cc``); each was checked against Ray
2.40 and 2.60 (``tests/domain/test_domain_ray_causes.py`` reads Ray's own protobuf messages,
exceptions and GCS binary). Where Ray gives none of these, the cause is ``unknown``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from statemachine.domain.death import UNKNOWN_DEATH, ActorDeath, DeathCause

_C = DeathCause

#: ``ActorDeathCause``'s context (its ``oneof`` field) -> cause, for every context but
#: ``actor_died_error_context`` (whose ``reason`` says more: :data:`ACTOR_DIED_REASONS`).
CONTEXT_CAUSES: dict[str, DeathCause] = {
    "oom_context": _C.OOM,
    "runtime_env_failed_context": _C.RUNTIME_ENV_FAILED,
    "actor_unschedulable_context": _C.UNSCHEDULABLE,
    "creation_task_failure_context": _C.CREATION_FAILED,
}

#: ``ActorDiedErrorContext.Reason`` -> cause (``NODE_DIED`` is refined by the node's death).
ACTOR_DIED_REASONS: dict[str, DeathCause] = {
    "UNSPECIFIED": _C.UNKNOWN,
    "WORKER_DIED": _C.WORKER_CRASHED,
    "OWNER_DIED": _C.OWNER_DIED,
    "NODE_DIED": _C.NODE_DIED,
    "RAY_KILL": _C.KILLED,
    "OUT_OF_SCOPE": _C.OUT_OF_SCOPE,
    "REF_DELETED": _C.OUT_OF_SCOPE,
}

#: ``NodeDeathInfo.Reason`` -> cause of an actor whose node died (``UNSPECIFIED``: the node
#: died, Ray did not say how).
NODE_DEATH_REASONS: dict[str, DeathCause] = {
    "UNSPECIFIED": _C.NODE_DIED,
    "EXPECTED_TERMINATION": _C.NODE_TERMINATED,
    "UNEXPECTED_TERMINATION": _C.NODE_DIED,
    "AUTOSCALER_DRAIN_PREEMPTED": _C.PREEMPTED,
    "AUTOSCALER_DRAIN_IDLE": _C.NODE_DRAINED_IDLE,
}

#: The enums' numbers (``ray.nodes()`` gives ``DeathReason`` as a number).
ACTOR_DIED_REASON_NAMES: dict[int, str] = {
    0: "UNSPECIFIED", 1: "WORKER_DIED", 2: "OWNER_DIED", 3: "NODE_DIED", 4: "RAY_KILL",
    5: "OUT_OF_SCOPE", 6: "REF_DELETED",
}
NODE_DEATH_REASON_NAMES: dict[int, str] = {
    0: "UNSPECIFIED", 1: "EXPECTED_TERMINATION", 2: "UNEXPECTED_TERMINATION",
    3: "AUTOSCALER_DRAIN_PREEMPTED", 4: "AUTOSCALER_DRAIN_IDLE",
}

#: Exception types (qualified names) Ray raises for an actor death other than a
#: ``RayActorError``: the death cause's context made into an error of its own
#: (``GetErrorInfoFromActorDeathCause``).
EXCEPTION_CAUSES: dict[str, tuple[DeathCause, str]] = {
    "ray.exceptions.OutOfMemoryError": (_C.OOM, "oom_context"),
    "ray.exceptions.RuntimeEnvSetupError": (_C.RUNTIME_ENV_FAILED, "runtime_env_failed_context"),
    "ray.exceptions.ActorUnschedulableError": (_C.UNSCHEDULABLE, "actor_unschedulable_context"),
}
#: The base of the exceptions Ray raises for an actor that died or is unavailable.
RAY_ACTOR_ERROR = "ray.exceptions.RayActorError"

#: The sentences Ray's GCS writes into an actor's death message, in the order they are
#: tried (the specific before the general), with the reason they stand for: a
#: ``RayActorError``'s message carries them when its death context does not survive.
#: A node's sentence is followed by the node death's message up to the end of the line.
MESSAGE_SENTENCES: tuple[tuple[str, DeathCause, str], ...] = (
    ("the actor's node was preempted: ", _C.PREEMPTED, "NODE_DIED/AUTOSCALER_DRAIN_PREEMPTED"),
    ("the actor's node was terminated unexpectedly: ", _C.NODE_DIED,
     "NODE_DIED/UNEXPECTED_TERMINATION"),
    ("the actor's node was terminated expectedly: ", _C.NODE_TERMINATED,
     "NODE_DIED/EXPECTED_TERMINATION"),
    ("the actor's node was terminated: ", _C.NODE_DIED, "NODE_DIED"),
    ("The actor died because its node has died.", _C.NODE_DIED, "NODE_DIED"),
    ("The actor is dead because its worker process has died.", _C.WORKER_CRASHED, "WORKER_DIED"),
    ("The actor is dead because it was killed by `ray.kill`.", _C.KILLED, "RAY_KILL"),
    ("The actor is dead because its owner has died.", _C.OWNER_DIED, "OWNER_DIED"),
    ("The actor is dead because all references to the actor were removed including lineage "
     "ref count.", _C.OUT_OF_SCOPE, "REF_DELETED"),
    ("The actor is dead because all references to the actor were removed.", _C.OUT_OF_SCOPE,
     "OUT_OF_SCOPE"),
)
_EXIT_TYPE = re.compile(r"Worker exit type: ([A-Z_]+)")


def _name(value: Any, names: Mapping[int, str]) -> str:
    """An enum value as Ray names it (a name as given; a number looked up)."""
    if isinstance(value, bool):
        return "UNSPECIFIED"
    if isinstance(value, int):
        return names.get(value, "UNSPECIFIED")
    return value if isinstance(value, str) and value else "UNSPECIFIED"


def _worker_reason(message: str) -> str:
    """``WORKER_DIED/SYSTEM_ERROR``: the worker's exit type, when Ray's message names one."""
    match = _EXIT_TYPE.search(message)
    return f"WORKER_DIED/{match.group(1)}" if match else "WORKER_DIED"


def death_from_state_api(death_cause: Mapping[str, Any] | None) -> ActorDeath:
    """The death that Ray's ``ActorDeathCause`` (as the state API gives it) says.

    ``death_cause``: ``get_actor(id, detail=True).death_cause``, a dict with one context key
    (``None`` or ``{}``: Ray has no cause, ``unknown``). Enum values may be names or numbers.
    """
    if not death_cause:
        return UNKNOWN_DEATH
    for context, cause in CONTEXT_CAUSES.items():
        if context in death_cause:
            return ActorDeath(cause, context)
    died = death_cause.get("actor_died_error_context")
    if not isinstance(died, Mapping):
        return UNKNOWN_DEATH
    reason = _name(died.get("reason"), ACTOR_DIED_REASON_NAMES)
    cause = ACTOR_DIED_REASONS.get(reason, _C.UNKNOWN)
    if cause is _C.UNKNOWN:
        return UNKNOWN_DEATH
    if cause is _C.WORKER_CRASHED:
        return ActorDeath(cause, _worker_reason(str(died.get("error_message") or "")))
    if cause is not _C.NODE_DIED:
        return ActorDeath(cause, reason)
    node = died.get("node_death_info")
    if not isinstance(node, Mapping):
        return ActorDeath(_C.NODE_DIED, reason)
    node_reason = _name(node.get("reason"), NODE_DEATH_REASON_NAMES)
    message = str(node.get("reason_message") or "")
    if node_reason == "UNSPECIFIED":
        return ActorDeath(_C.NODE_DIED, reason, message)
    return ActorDeath(NODE_DEATH_REASONS.get(node_reason, _C.NODE_DIED),
                      f"{reason}/{node_reason}", message)


def death_from_node_table(reason: int | str | None, message: str | None) -> ActorDeath:
    """The death of an actor whose node ``ray.nodes()`` reports dead with ``reason``.

    ``reason``/``message``: the node's ``DeathReason`` (a ``NodeDeathInfo.Reason`` number or
    name) and ``DeathReasonMessage``. A node that is not dead (``UNSPECIFIED``) says nothing
    of the actor: ``unknown``.
    """
    name = _name(reason, NODE_DEATH_REASON_NAMES)
    if name == "UNSPECIFIED" or name not in NODE_DEATH_REASONS:
        return UNKNOWN_DEATH
    return ActorDeath(NODE_DEATH_REASONS[name], f"NODE_DIED/{name}", message or "")


def _death_from_message(message: str) -> ActorDeath:
    for sentence, cause, reason in MESSAGE_SENTENCES:
        at = message.find(sentence)
        if at < 0:
            continue
        if cause is _C.WORKER_CRASHED:
            return ActorDeath(cause, _worker_reason(message[at:]))
        node_message = ""
        if sentence.endswith(": "):
            node_message = message[at + len(sentence):].split("\n", 1)[0].strip()
        return ActorDeath(cause, reason, node_message)
    return UNKNOWN_DEATH


def death_from_exception(
    type_names: Iterable[str],
    *,
    preempted: bool = False,
    actor_init_failed: bool = False,
    message: str = "",
) -> ActorDeath | None:
    """The death that an exception Ray raised for a trial's actor says, or ``None`` when it is
    not an actor death at all.

    ``type_names``: the qualified names of the exception's type and its bases
    (``ray.exceptions.ActorDiedError``, ``ray.exceptions.RayActorError``, ...);
    ``preempted``/``actor_init_failed``: the ``RayActorError``'s properties; ``message``: its
    ``str()``. A ``RayActorError`` that says nothing more (an ``ActorUnavailableError``, say)
    is ``unknown``: the state API may tell later (an amendment).
    """
    names = set(type_names)
    for name, (cause, reason) in EXCEPTION_CAUSES.items():
        if name in names:
            return ActorDeath(cause, reason)
    if RAY_ACTOR_ERROR not in names:
        return None
    if preempted:
        death = _death_from_message(message)
        return death if death.cause is _C.PREEMPTED else ActorDeath(_C.PREEMPTED, "preempted")
    if actor_init_failed:
        return ActorDeath(_C.CREATION_FAILED, "actor_init_failed")
    death = _death_from_message(message)
    # Ray sets ``preempted`` from the very reason the sentence stands for: a preempted
    # sentence without the flag is not Ray's (a message quoting it), so it proves nothing.
    return UNKNOWN_DEATH if death.cause is _C.PREEMPTED else death
