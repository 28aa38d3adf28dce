"""Where Ray placed a trial's actor, and where a failure happened: nodes and actors.

The node of an actor comes from the GCS actor table (``ray._private.state.state.actor_table``,
internal: ``Address.NodeID``/``IPAddress``) and ``ray.nodes()`` (``NodeID``,
``NodeManagerAddress``, ``NodeManagerHostname``, ``Alive``, ``Resources``), cached for a
second; the actor of a trial from ``trial.temporary_state.ray_actor`` (its ``_actor_id``), the
actor of a failure from ``RayActorError.actor_id`` or ``RayTaskError._actor_id``, and a task
error's ``.ip``. Each access is listed, with the Ray versions it was checked on, in
:mod:`..ray_surface`.

Why an actor died (Ray's ``ActorDiedError`` death cause, the state API's ``death_cause``, a
node's ``DeathReason``: issue 28) is another job: a module of its own beside this one, reading
the same exception chain as :func:`failure_actor_id`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from statemachine.domain.nodes import NodeRef

if TYPE_CHECKING:
    from ray.tune.experiment import Trial

__all__ = [
    "actor_node",
    "failure_actor_id",
    "failure_ip",
    "failure_node",
    "live_nodes",
    "node_ref",
    "started_actor",
    "trial_actor_id",
]

_NODES_TTL_S = 1.0
_lock = threading.Lock()
_nodes_cache: tuple[float, dict[str, dict[str, Any]]] = (0.0, {})


def _nodes(refresh: bool = False) -> dict[str, dict[str, Any]]:
    """``ray.nodes()`` by node id, cached for a second (a GCS call)."""
    global _nodes_cache
    now = time.monotonic()
    with _lock:
        taken, table = _nodes_cache
        if refresh or now - taken > _NODES_TTL_S or not table:
            import ray

            table = {n["NodeID"]: n for n in ray.nodes()}  # type: ignore[no-untyped-call]
            _nodes_cache = (now, table)
        return table


def live_nodes(excluded: Iterable[str] = ()) -> list[dict[str, Any]]:
    """The live nodes of ``ray.nodes()`` (cached) whose id is not in ``excluded``."""
    avoid = set(excluded)
    return [n for n in _nodes().values() if n.get("Alive") and n["NodeID"] not in avoid]


def node_ref(node_id: str | None, ip: str | None = None) -> NodeRef | None:
    """What the node table says about ``node_id`` (``ip`` when the table does not tell)."""
    if not node_id:
        return NodeRef(node_ip=ip) if ip else None
    try:
        info = _nodes().get(node_id) or _nodes(refresh=True).get(node_id)
    except Exception:
        info = None
    if info is None:
        return NodeRef(node_id=node_id, node_ip=ip or None)
    return NodeRef(node_id=node_id,
                   node_ip=info.get("NodeManagerAddress") or ip or None,
                   hostname=info.get("NodeManagerHostname") or None)


def actor_node(actor_id: str | None) -> NodeRef | None:
    """The node an actor was placed on, from the GCS actor table (``None``: not known)."""
    if not actor_id:
        return None
    try:
        from ray._private.state import state

        info = state.actor_table(actor_id)
    except Exception:
        return None
    address = (info.get("Address") or {}) if isinstance(info, dict) else {}
    node_id = address.get("NodeID") or None
    if node_id and set(node_id) == {"0"}:  # a nil id: not placed yet
        node_id = None
    return node_ref(node_id, address.get("IPAddress") or None)


def trial_actor_id(trial: Trial) -> str | None:
    """The id of the trial's current actor, if it has one."""
    try:
        actor = trial.temporary_state.ray_actor
        return str(actor._actor_id.hex()) if actor is not None else None
    except Exception:
        return None


def started_actor(trial: Trial) -> tuple[str | None, NodeRef | None]:
    """The trial's actor id and the node it was placed on (on ``on_trial_start``)."""
    actor_id = trial_actor_id(trial)
    return actor_id, actor_node(actor_id)


def failure_actor_id(exc: BaseException | None) -> str | None:
    """The actor a Ray failure names (``RayActorError.actor_id``, a task error's actor)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        for name in ("actor_id", "_actor_id"):
            value = getattr(exc, name, None)
            if isinstance(value, str) and value:
                return value
            to_hex = getattr(value, "hex", None)
            if value is not None and callable(to_hex):
                return str(to_hex())
        exc = exc.__cause__ or getattr(exc, "cause", None)
        if not isinstance(exc, BaseException):
            break
    return None


def failure_ip(exc: BaseException | None) -> str | None:
    """The IP a ``RayTaskError`` was raised on (set by the worker that raised it)."""
    from ray.exceptions import RayTaskError

    return exc.ip if isinstance(exc, RayTaskError) and isinstance(exc.ip, str) else None


def failure_node(trial: Trial, exc: BaseException | None,
                 started: tuple[str | None, NodeRef | None] | None) -> NodeRef | None:
    """Where a trial's failure happened: the node of the actor it names, else of the trial's
    actor, else (the same actor) where it started; else the IP a task error carries."""
    actor_id = failure_actor_id(exc) or trial_actor_id(trial)
    node = actor_node(actor_id)
    if node is None or node.node_id is None:
        if started is not None and started[0] is not None and started[0] == actor_id:
            node = started[1] or node
    if node is None:
        ip = failure_ip(exc)
        node = NodeRef(node_ip=ip) if ip else None
    return node
