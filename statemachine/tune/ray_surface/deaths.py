"""Why an actor died, as Ray's GCS and state API say after the fact; a drill that drains a node.

Ray raises an actor's death with what it knew then (an ``ActorDiedError`` carries the words of
its ``ActorDeathCause``; an ``ActorUnavailableError`` says nothing). What Ray learns later
is read here, each access checked in the source of Ray 2.40.0 and Ray 2.60.0 (the oldest and
newest supported) and listed in :mod:`..ray_surface`:

- the GCS actor table (``ray._private.state.state.actor_table(actor_id)``, internal, the call
  :mod:`.nodes` makes already): its ``State`` and ``DeathCause`` (an ``ActorDeathCause``
  protobuf message of ``ray.core.generated.common_pb2``), read into the dict the state API
  gives (snake_case field names, enum names) by :func:`actor_table_death`. Same in both;
  needs no dashboard;
- ``ray.util.state.get_actor(id, timeout=...)`` (DeveloperAPI; its ``death_cause``, a detail
  column: ``get`` always asks for the detail): :func:`state_api_death`. Same in both; needs
  the dashboard, so it is only asked when the actor table does not answer;
- ``ray.nodes()`` (``NodeID``, ``Alive``, ``DeathReason``: a ``NodeDeathInfo.Reason`` number,
  ``DeathReasonMessage``): :func:`node_death`. Same in both (:func:`has_node_death_info`
  checks the protobuf has ``NodeDeathInfo``; ``compat.death_cause_support`` is the gate);
- the drill (:func:`drain_node`): ``ray._raylet.GcsClient(address=...).drain_node(node_id,
  reason, reason_message, deadline_timestamp_ms)`` with
  ``ray.core.generated.autoscaler_pb2.DrainNodeReason`` (``DRAIN_NODE_REASON_PREEMPTION``),
  as Ray's own ``python/ray/tests/test_draining.py`` calls it; internal (not a public API),
  the same signature in both; returns ``(accepted, rejection message)``. The drained node is
  then killed as a reclaimed machine would be: its raylet process, found on this machine by
  the ``--node_id=<hex>`` argument Ray starts every raylet with (``services.start_raylet``,
  what Ray's own ``services.find_node_ids`` reads), is sent ``SIGKILL``
  (:func:`raylet_pids`). Same in both. A raylet stopped any other way Ray knows of
  (``GcsClient.drain_nodes``, ``ray stop``) is recorded as an expected termination, not a
  preemption.

Every function here answers ``None`` (or raises nothing) when Ray cannot tell; none of them is
called on Ray's event loop but :func:`drain_node` (a user's command).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "actor_table_death",
    "drain_node",
    "has_node_death_info",
    "node_death",
    "raylet_pids",
    "state_api_death",
]


def _module(name: str) -> Any:
    """A module of Ray's (or protobuf's) as an untyped value: generated code has no stubs."""
    return importlib.import_module(name)


def _message_dict(message: Any) -> dict[str, Any]:
    """A protobuf message as the state API gives it (field names as declared, enum names)."""
    json_format = _module("google.protobuf.json_format")
    return dict(json_format.MessageToDict(message, preserving_proto_field_name=True))


def actor_table_death(actor_id: str) -> tuple[bool, dict[str, Any] | None]:
    """``(dead, death cause)`` of the actor from the GCS actor table.

    ``dead``: the table says the actor is ``DEAD``; the cause is ``None`` when the table has
    none (yet), or the actor is unknown, or the table cannot be read.
    """
    try:
        from ray._private.state import state

        info = state.actor_table(actor_id)
    except Exception:
        return False, None
    if not isinstance(info, dict) or not info:
        return False, None
    dead = info.get("State") == "DEAD"
    cause = info.get("DeathCause")
    if cause is None or not hasattr(cause, "ListFields") or not cause.ListFields():
        return dead, None
    try:
        return dead, _message_dict(cause)
    except Exception:
        return dead, None


def state_api_death(actor_id: str, timeout_s: float) -> dict[str, Any] | None:
    """The actor's ``death_cause`` from Ray's state API (``None``: not dead, no cause, no
    dashboard to ask, or no answer within ``timeout_s``)."""
    try:
        from ray.util.state import get_actor

        actor = get_actor(actor_id, timeout=max(1, int(timeout_s)))
    except Exception:
        return None
    cause = getattr(actor, "death_cause", None)
    return cause if isinstance(cause, dict) and cause else None


def node_death(node_id: str) -> tuple[int | str, str] | None:
    """``(DeathReason, DeathReasonMessage)`` of a dead node from ``ray.nodes()``; ``None``
    when the node is alive, unknown, or this Ray's node table has no death reason."""
    try:
        import ray

        table = ray.nodes()  # type: ignore[no-untyped-call]
    except Exception:
        return None
    for node in table:
        if node.get("NodeID") != node_id:
            continue
        if node.get("Alive") or "DeathReason" not in node:
            return None
        reason = node.get("DeathReason")
        message = node.get("DeathReasonMessage")
        return (reason if isinstance(reason, (int, str)) else 0,
                message if isinstance(message, str) else "")
    return None


def has_node_death_info() -> bool:
    """Whether this Ray's protobufs carry why an actor and its node died (``ActorDeathCause``
    with ``actor_died_error_context.node_death_info``)."""
    try:
        common_pb2 = _module("ray.core.generated.common_pb2")
        context = common_pb2.ActorDiedErrorContext.DESCRIPTOR
        return ("node_death_info" in context.fields_by_name
                and "context" in common_pb2.ActorDeathCause.DESCRIPTOR.oneofs_by_name)
    except Exception:
        return False


def drain_node(gcs_address: str, node_id: str, message: str,
               deadline_ms: int) -> tuple[bool, str]:
    """Ask Ray's GCS to drain ``node_id`` for preemption by ``deadline_ms`` (a Unix time in
    milliseconds): ``(accepted, Ray's rejection message)``. Raises what Ray raises (an
    unknown node id, a GCS that cannot be reached)."""
    autoscaler_pb2 = _module("ray.core.generated.autoscaler_pb2")
    client = _module("ray._raylet").GcsClient(address=gcs_address)
    accepted, rejection = client.drain_node(
        node_id, autoscaler_pb2.DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION"),
        message, deadline_ms)
    return bool(accepted), str(rejection or "")


def raylet_pids(node_id: str) -> list[int]:
    """The pids of the raylet processes of ``node_id`` running on this machine (``/proc``:
    an executable named ``raylet`` started with ``--node_id=<node_id>``)."""
    from pathlib import Path

    wanted = f"--node_id={node_id}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if args and Path(args[0].decode("utf-8", "replace")).name == "raylet" and wanted in args:
            found.append(int(entry.name))
    return sorted(found)
