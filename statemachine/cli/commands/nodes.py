"""``trial-replay nodes EXP``: per cluster node, attempts and failures; worst node first."""

from __future__ import annotations

from typing import Any

import click

from statemachine.cli.db import open_store
from statemachine.cli.output import Output, json_option
from statemachine.cli.reading import decode_trial, group_by_trial, require_experiment
from statemachine.cli.schema import node_row
from statemachine.domain.nodes import short_node_id, tally_nodes


@click.command("nodes")
@click.argument("experiment")
@json_option
@click.pass_obj
def nodes(out: Output, experiment: str, as_json: bool) -> int:
    """Per node (Ray node id, IP, hostname): attempts started, training failures, restore
    failures, preemptions, actor deaths; the node that failed most restores first."""
    with open_store(out.db) as store:
        require_experiment(store, experiment)
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
        ["node-id", "ip", "host", "starts", "restoring", "train fail", "restore fail",
         "preempt", "died", "trials"],
        [[_node_id(r), r["node_ip"], r["hostname"], r["attempts"], r["restore_attempts"],
          r["training_failures"], r["restore_failures"], r["preemptions"], r["actor_deaths"],
          len(r["trials"])]
         for r in rows],
        title=f"Nodes of {experiment} (most restore failures first)",
        status_column=None,
    )
    return out.exit_code


def _node_id(row: dict[str, Any]) -> str:
    """The start of the node id (``--json`` has it whole), as Ray's own messages show it."""
    if row["node_id"]:
        return short_node_id(row["node_id"]) or ""
    return "unknown" if row["node_ip"] is None and row["hostname"] is None else "-"
