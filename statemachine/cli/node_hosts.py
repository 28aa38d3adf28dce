"""Per-node tallies grouped by machine, as ``trial-replay nodes`` shows them.

Ray gives a node a new id each time Ray starts on it (a driver that restarts Ray, a head
node brought back), so one machine appears under several node ids. People think in machines:
a host is an IP address (else a hostname) and its node ids are listed under it. The tallies
themselves are never merged on a guess (:func:`statemachine.domain.nodes.tally_nodes`); this
only groups them for reading, and each keeps its own row under its host.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from statemachine.domain.node_tally import NodeTally

__all__ = ["COUNTS", "Host", "group_by_host", "host_key"]

#: The tally counts a host sums over its node ids.
COUNTS = ("attempts", "restore_attempts", "training_failures", "restore_failures",
          "preemptions", "actor_deaths", "other_failures")


def host_key(tally: NodeTally) -> str | None:
    """The machine a tally's node is on: its IP, else its hostname (``None``: unknown)."""
    return tally.node.node_ip or tally.node.hostname


@dataclass
class Host:
    """One machine and the node ids it had (worst first)."""

    key: str | None
    """Its IP address, else its hostname; ``None`` for attempts with no node recorded."""
    node_ip: str | None = None
    hostname: str | None = None
    nodes: list[NodeTally] = field(default_factory=list)

    def total(self, count: str) -> int:
        """One of :data:`COUNTS`, summed over the host's node ids."""
        return sum(int(getattr(t, count)) for t in self.nodes)

    @property
    def failures(self) -> int:
        """Every failure recorded on the host."""
        return sum(t.failures for t in self.nodes)

    @property
    def trials(self) -> set[str]:
        """The trials that ran there."""
        return set().union(*(t.trials for t in self.nodes))

    def sort_key(self) -> tuple[int, int, int, int, str]:
        """Worst first, as the tallies: restore failures, failures, attempts; unknown last
        among equals."""
        return (-self.total("restore_failures"), -self.failures, -self.total("attempts"),
                self.key is None, self.key or "")


def group_by_host(tallies: Iterable[NodeTally]) -> list[Host]:
    """The tallies grouped by :func:`host_key`, worst host first, each host's nodes in the
    order given (worst first). A tally that knows only a hostname joins the host with that
    hostname when there is exactly one."""
    hosts: dict[str | None, Host] = {}
    by_name_only: list[NodeTally] = []
    for tally in tallies:
        if tally.node.node_ip is None and tally.node.hostname is not None:
            by_name_only.append(tally)
            continue
        key = host_key(tally)
        host = hosts.setdefault(key, Host(key))
        host.nodes.append(tally)
        host.node_ip = host.node_ip or tally.node.node_ip
        host.hostname = host.hostname or tally.node.hostname
    for tally in by_name_only:
        named = [h for h in hosts.values() if h.hostname == tally.node.hostname]
        host = named[0] if len(named) == 1 else hosts.setdefault(
            tally.node.hostname, Host(tally.node.hostname, hostname=tally.node.hostname))
        host.nodes.append(tally)
    for host in hosts.values():
        host.nodes.sort(key=lambda t: t.sort_key())
    return sorted(hosts.values(), key=Host.sort_key)
