"""``trial-replay tail EXP [--follow]``: the latest events, and with ``--follow`` a live view."""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import click

from statemachine.cli.db import open_store
from statemachine.cli.output import Output, json_option
from statemachine.cli.params import FiniteFloat, count
from statemachine.cli.reading import damage_message, require_experiment
from statemachine.cli.schema import event_row


def _line(trial_id: str, r: dict[str, Any]) -> str:
    counters = r["counters"] or {}
    text = (
        f"{r['position']:>6}  {(r['recorded_at'] or '')[:23].replace('T', ' ')}  "
        f"epoch {r['epoch']}  {trial_id} #{r['seq']}  {r['event']}"
    )
    if r["error_type"]:
        text += f" {r['error_type']}({r['error_cause']})"
    text += f"  {r['status_before']} -> {r['status_after']}"
    if r["decision"]:
        text += f"  {r['decision']}"
    if counters:
        text += (
            f"  [failures {counters.get('failures')}, restore "
            f"{counters.get('restore_failures')}/{counters.get('total_restore_failures')}, "
            f"preemptions {counters.get('preemptions')}]"
        )
    return text


@click.command("tail")
@click.argument("experiment", required=False)
@click.option("-f", "--follow", is_flag=True, help="Keep printing new events as they land.")
@click.option("-n", "--lines", "count", type=count(0, 10**9), default=20, show_default=True,
              help="How many of the latest events to print first.")
@click.option("--interval", type=FiniteFloat(0.05, 3600), default=0.5, show_default=True,
              help="Seconds between polls with --follow.")
@json_option
@click.pass_obj
def tail(out: Output, experiment: str | None, follow: bool, count: int, interval: float,
         as_json: bool) -> int:
    """Print the experiment's latest events (one line each; ``--json``: one JSON object per
    line) and, with ``--follow``, every new event until interrupted (Ctrl-C)."""
    with open_store(out.db) as store:
        experiment = require_experiment(store, experiment)
        last = deque(store.read_experiment(experiment), maxlen=count)
        position = last[-1].position if last else 0
        for row in last:
            _print(out, row, as_json)
        if not last:
            position = max((r.position for r in store.read_experiment(experiment)), default=0)
        if not follow:
            return out.exit_code
        try:
            while True:
                time.sleep(interval)
                for row in store.read_experiment(experiment, from_position=position):
                    if row.position <= position:
                        continue
                    _print(out, row, as_json)
                    position = row.position
        except KeyboardInterrupt:
            return out.exit_code


def _print(out: Output, row: Any, as_json: bool) -> None:
    if row.damage is not None:
        out.warn(damage_message(row))
    data = event_row(row)
    if as_json:
        out.json_line({"experiment": row.experiment, "trial_id": row.trial_id, **data})
    else:
        out.echo(_line(row.trial_id, data))
