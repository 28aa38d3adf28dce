"""Where an attempt ran: the node of a trial's actor.

A :class:`NodeRef` is what the Ray adapter could learn about a node (its Ray node id, IP and
hostname); every field it could not learn is ``None``, never guessed. A leaf of the domain:
events and states refer to nodes, and this module imports nothing of theirs (the per-node
tally is :mod:`statemachine.domain.node_tally`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from statemachine.exceptions import EventDecodeError

_FIELDS = ("node_id", "node_ip", "hostname")


@dataclass(frozen=True, slots=True)
class NodeRef:
    """A cluster node as far as it is known (``None``: not known).

    Attributes:
        node_id: Ray's node id (hex).
        node_ip: the node's IP address.
        hostname: the node's hostname.
    """

    node_id: str | None = None
    node_ip: str | None = None
    hostname: str | None = None

    @property
    def known(self) -> bool:
        """Whether anything at all is known about the node."""
        return any(getattr(self, name) is not None for name in _FIELDS)

    @property
    def key(self) -> str:
        """What identifies the node in a tally: its id, else its IP, else its hostname."""
        return self.node_id or self.node_ip or self.hostname or "unknown"

    def describe(self) -> str:
        """``node 10.0.0.7 (node-id 3f2a...)``: what a person reads."""
        where = self.node_ip or self.hostname or "unknown"
        short = short_node_id(self.node_id)
        return f"node {where} (node-id {short})" if short else f"node {where}"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of this node."""
        return {name: getattr(self, name) for name in _FIELDS}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NodeRef:
        """Rebuild a node from :meth:`to_dict` output; unknown keys or non-strings refused."""
        unknown = set(data) - set(_FIELDS)
        if unknown:
            raise EventDecodeError(f"node has unknown field(s): {', '.join(sorted(unknown))}")
        values = {name: data.get(name) for name in _FIELDS}
        for name, value in values.items():
            if value is not None and not isinstance(value, str):
                raise EventDecodeError(f"node field {name!r} must be a string or null, "
                                       f"got {value!r}")
        return cls(**values)


def short_node_id(node_id: str | None) -> str | None:
    """The first 12 hex digits of a node id, as Ray's own messages abbreviate it."""
    if not node_id:
        return None
    return node_id if len(node_id) <= 12 else f"{node_id[:12]}..."
