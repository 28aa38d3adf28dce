"""``trial-replay trials EXP``: per trial its status, failure counters and last error."""

from __future__ import annotations

import click

from statemachine.cli.db import open_store
from statemachine.cli.output import Output, json_option
from statemachine.cli.reading import fold_states, parse_at, require_experiment
from statemachine.cli.schema import STATUSES, trial_row


@click.command("trials")
@click.argument("experiment")
@click.option("--at", "at_text", metavar="SEQ|TIME",
              help="The state as it was at this event position (integer) or ISO time.")
@click.option("--status", "status_filter", type=click.Choice(STATUSES, case_sensitive=False),
              help="Only trials in this status.")
@json_option
@click.pass_obj
def trials(
    out: Output, experiment: str, at_text: str | None, status_filter: str | None, as_json: bool
) -> int:
    """Per trial: status, failures, restore failures (this episode and total), preemptions,
    last error type and message, latest checkpoint."""
    at = parse_at(at_text)
    with open_store(out.db) as store:
        require_experiment(store, experiment)
        states = fold_states(store, experiment, out, at)
    rows = [trial_row(s) for s in states]
    if status_filter:
        rows = [r for r in rows if r["status"] == status_filter.upper()]
    if as_json:
        out.json(rows)
        return out.exit_code
    title = f"Trials of {experiment}"
    if at is not None:
        title += f" at {next(iter(at.to_json().values()))}"
    out.table(
        ["trial", "status", "failures", "restore fails (episode/total)", "preemptions",
         "last error", "last decision", "latest checkpoint"],
        [
            [
                r["trial_id"], r["status"], r["num_failures"],
                f"{r['num_restore_failures']}/{r['total_restore_failures']}",
                r["num_preemptions"],
                f"{r['last_error_type']} ({_short(r['last_error_cause'])}): "
                f"{r['last_error_message']}"
                if r["last_error_type"] else "",
                r["last_decision"], r["latest_checkpoint"],
            ]
            for r in rows
        ],
        title=title,
        status_column="status",
    )
    return out.exit_code


def _short(cause: str | None) -> str:
    return (cause or "").rsplit(".", 1)[-1]
