"""The nodes page of ``trial-replay serve``: each machine and, under it, the Ray node ids it
had, with what happened there, worst machine first, as ``trial-replay nodes`` shows them
(:func:`statemachine.cli.node_hosts.group_by_host` groups; nothing is merged on a guess).
Each machine links to the trials whose last failure was on it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from statemachine.cli.web.markup import e, experiment_href, table
from statemachine.domain.nodes import short_node_id

if TYPE_CHECKING:
    from statemachine import NodeTally
    from statemachine.cli.node_hosts import Host

__all__ = ["HEADERS", "nodes_body"]

HEADERS = ("host", "ip", "node id", "starts", "restoring", "training failures",
           "restore failures", "preemptions", "actor deaths", "trials")
_SUMS = ("attempts", "restore_attempts", "training_failures", "restore_failures",
         "preemptions", "actor_deaths")


def _counts(tally: NodeTally) -> list[str]:
    return [str(getattr(tally, c)) for c in _SUMS] + [str(len(tally.trials))]


def _node_id(tally: NodeTally) -> str:
    node_id = tally.node.node_id
    if not node_id:
        return "(no node id)"
    return f'<span title="{e(node_id)}">{e(short_node_id(node_id))}</span>'


def _rows(experiment: str, host: Host) -> list[list[str]]:
    name = "unknown" if host.key is None else host.hostname or "-"
    if host.key is not None:
        href = f"{experiment_href(experiment)}?node={e(host.key)}"
        name = f'<a href="{href}" title="trials whose last failure was here">{e(name)}</a>'
    ip = e(host.node_ip or "")
    if len(host.nodes) == 1:
        return [[name, ip, _node_id(host.nodes[0]), *_counts(host.nodes[0])]]
    head = [f"<b>{name}</b>", ip, f"{len(host.nodes)} node ids",
            *(str(host.total(c)) for c in _SUMS), str(len(host.trials))]
    return [head, *([" ", "", _node_id(t), *_counts(t)] for t in host.nodes)]


def nodes_body(experiment: str, hosts: list[Host]) -> tuple[str, list[dict[str, Any]]]:
    """The nodes page's body, and its hosts as JSON."""
    rows = [row for host in hosts for row in _rows(experiment, host)]
    body = (
        f'<nav><a href="/">experiments</a> / <a href="{experiment_href(experiment)}">'
        f"{e(experiment)}</a> / nodes</nav>"
        f"<h1>Nodes of {e(experiment)}</h1>"
        "<p>By machine (IP, else hostname), most restore failures first; under a machine "
        "that had several, each Ray node id (Ray gives a node a new id each time it starts "
        "there).</p>"
        + (table(HEADERS, rows, css="nodes") if rows else "<p>No attempt recorded yet.</p>")
    )
    data = [{"host": h.key, "node_ip": h.node_ip, "hostname": h.hostname,
             **{c: h.total(c) for c in _SUMS}, "trials": len(h.trials),
             "node_ids": [t.node.node_id for t in h.nodes]} for h in hosts]
    return body, data
