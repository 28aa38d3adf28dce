"""``trial-replay nodes EXP``: per cluster node, attempts and failures; worst node first."""

from __future__ import annotations

from typing import Any

import click

from statemachine.cli.db import open_store
from statemachine.cli.output import Column, Output, json_option, wide_option
from statemachine.cli.reading import decode_trial, group_by_trial, require_experiment
from statemachine.cli.schema import node_row
from statemachine.domain.node_tally import tally_nodes
from statemachine.domain.nodes import short_node_id


@click.command("nodes")
@click.argument("experiment", required=False)
@json_option
@wide_option
@click.pass_obj
def nodes(out: Output, experiment: str | None, as_json: bool) -> int:
    """Per node (Ray node id, IP, hostname): attempts started, training failures, restore
    failures, preemptions, actor deaths; the node that failed most restores first."""
    with open_store(out.db) as store:
        experiment = require_experiment(store, experiment)
        pairs = [
            (trial_id, event)
            for trial_id, rows in group_by_trial(store.read_experiment(experiment)).items()
            for _, event in decode_trial(rows, out)
        ]
    rows = [node_row(tally) for tally in tally_nodes(pairs)]
    if as_json:
        out.json(rows)
        return out.exit_code
    if any(r["node_id"] is None and r["node_ip"] is None and r["hostname"] is None
           for r in rows):
        out.note("attempts recorded without a node (a log written before nodes were "
                 "recorded, or Ray did not tell) are counted under 'unknown'")
    out.table(
        [Column("node-id"), Column("ip", 1), Column("host", 2),
         Column("starts", 3, justify="right"), Column("restoring", 5, justify="right"),
         Column("train fail", 2, justify="right"), Column("restore fail", 1, justify="right"),
         Column("preempt", 4, justify="right"), Column("died", 4, justify="right"),
         Column("trials", 3, justify="right")],
        [[_node_id(r, out.wide), r["node_ip"], r["hostname"], r["attempts"], r["restore_attempts"],
          r["training_failures"], r["restore_failures"], r["preemptions"], r["actor_deaths"],
          len(r["trials"])]
         for r in rows],
        title=f"Nodes of {experiment} (most restore failures first)",
    )
    return out.exit_code


def _node_id(row: dict[str, Any], wide: bool) -> str:
    """The start of the node id (``--wide`` and ``--json`` have it whole), as Ray's own
    messages show it."""
    if row["node_id"]:
        return (row["node_id"] if wide else short_node_id(row["node_id"])) or ""
    return "unknown" if row["node_ip"] is None and row["hostname"] is None else "-"
