"""``trial-replay nodes EXP``: per machine and its Ray node ids, attempts and failures; worst
machine first."""

from __future__ import annotations

from typing import Any

import click

from statemachine.cli.db import open_store
from statemachine.cli.node_hosts import Host, group_by_host
from statemachine.cli.output import Column, Output, json_option, wide_option
from statemachine.cli.reading import read_model, require_experiment
from statemachine.cli.schema import node_row
from statemachine.domain.death import DeathCause
from statemachine.domain.node_tally import NodeTally
from statemachine.domain.nodes import short_node_id


@click.command("nodes")
@click.argument("experiment", required=False)
@json_option
@wide_option
@click.pass_obj
def nodes(out: Output, experiment: str | None, as_json: bool) -> int:
    """Per machine (IP, hostname) and under it each Ray node id it had (Ray gives a node a
    new id each time it starts there): attempts started, training failures, restore
    failures, preemptions, actor deaths, then the actor deaths by cause (one column per cause
    that occurred: node_died, worker_crashed, oom, ...); the machine that failed most restores
    first."""
    with open_store(out.db) as store:
        experiment = require_experiment(store, experiment)
        tallies = read_model(store, out).nodes(experiment)
    hosts = group_by_host(tallies)
    causes = _causes(tallies)
    if as_json:  # one row per Ray node, worst first, as before; "host": the machine it was on
        machine = {id(tally): host.key for host in hosts for tally in host.nodes}
        out.json([{**node_row(tally, causes), "host": machine[id(tally)]}
                  for tally in tallies])
        return out.exit_code
    if not tallies:
        out.text(f"no trial of experiment {experiment} has started yet: no node to show")
        return out.exit_code
    if any(host.key is None and any(t.node.node_id is None for t in host.nodes)
           for host in hosts):
        out.note("attempts recorded without a node (a log written before nodes were "
                 "recorded, or Ray did not tell) are counted under 'unknown'")
    out.table(
        [Column("host"), Column("ip", 1), Column("node-id", 2),
         Column("starts", 3, justify="right"), Column("restoring", 5, justify="right"),
         Column("train fail", 2, justify="right"), Column("restore fail", 1, justify="right"),
         Column("preempt", 4, justify="right"), Column("died", 4, justify="right"),
         Column("trials", 3, justify="right"),
         *(Column(cause.value, 4, justify="right") for cause in causes)],
        [row for host in hosts for row in _host_rows(host, out.wide, causes)],
        title=f"Nodes of {experiment} by machine (most restore failures first)",
    )
    return out.exit_code


def _causes(tallies: list[NodeTally]) -> list[DeathCause]:
    """The causes of actor deaths (not preempted: that is its own column) that occurred, in
    the order of :class:`DeathCause`."""
    seen = {cause for tally in tallies for cause in tally.causes}
    return [cause for cause in DeathCause if cause in seen]


def _counts(tally: NodeTally, causes: list[DeathCause]) -> list[Any]:
    return [tally.attempts, tally.restore_attempts, tally.training_failures,
            tally.restore_failures, tally.preemptions, tally.actor_deaths, len(tally.trials),
            *(tally.causes.get(cause, 0) for cause in causes)]


def _host_rows(host: Host, wide: bool, causes: list[DeathCause]) -> list[list[Any]]:
    """The host's row (its sums), then one row per node id when it had several."""
    name = "unknown" if host.key is None else host.hostname or "-"
    if len(host.nodes) == 1:
        return [[name, host.node_ip, _node_id(host.nodes[0], wide),
                 *_counts(host.nodes[0], causes)]]
    totals = [host.total(c) for c in ("attempts", "restore_attempts", "training_failures",
                                      "restore_failures", "preemptions", "actor_deaths")]
    by_cause = [sum(t.causes.get(cause, 0) for t in host.nodes) for cause in causes]
    head = [name, host.node_ip, f"{len(host.nodes)} node ids", *totals, len(host.trials),
            *by_cause]
    return [head, *(["", "", _node_id(t, wide), *_counts(t, causes)] for t in host.nodes)]


def _node_id(tally: Any, wide: bool) -> str:
    """The start of the node id (``--wide`` and ``--json`` have it whole), as Ray's own
    messages show it."""
    node_id = tally.node.node_id
    if node_id:
        return (node_id if wide else short_node_id(node_id)) or ""
    return "(no node id)"
