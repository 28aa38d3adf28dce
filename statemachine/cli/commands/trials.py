"""``trial-replay trials EXP``: per trial its status, failure counters and last error."""

from __future__ import annotations

from collections import Counter
from typing import Any

import click

from statemachine.cli.db import open_store
from statemachine.cli.output import Column, Output, basename, json_option, wide_option
from statemachine.cli.params import AtType
from statemachine.cli.reading import At, fold_states, read_model, require_experiment
from statemachine.cli.schema import STATUSES, summary_row, trial_row


@click.command("trials")
@click.argument("experiment", required=False)
@click.option("--at", "at", type=AtType(), metavar="SEQ|TIME",
              help="The state as it was at this event position (integer) or ISO time.")
@click.option("--status", "status_filter", type=click.Choice(STATUSES, case_sensitive=False),
              help="Only trials in this status.")
@json_option
@wide_option
@click.pass_obj
def trials(
    out: Output, experiment: str | None, at: At | None, status_filter: str | None,
    as_json: bool,
) -> int:
    """Per trial: status, failures, restore failures (this episode and total), preemptions,
    last error type and message, latest checkpoint."""
    counts: dict[str, int] = {}  # every trial per status, to say what there is when none match
    with open_store(out.db) as store:
        experiment = require_experiment(store, experiment)
        if at is not None:  # time travel folds the history up to that point
            rows = [trial_row(s) for s in fold_states(store, experiment, out, at)]
            counts = dict(Counter(r["status"] for r in rows))
            if status_filter:
                rows = [r for r in rows if r["status"] == status_filter.upper()]
        else:  # now: the read model (snapshots plus the events after them)
            model = read_model(store, out)
            page = model.trials(experiment, status=status_filter)
            rows = [summary_row(t) for t in page.items]
            if not rows and status_filter and not as_json:
                counts = model.status_counts(experiment)
    if as_json:
        out.json(rows)
        return out.exit_code
    if not rows:
        when = "" if at is None else " at " + " ".join(map(str, *at.to_json().items()))
        out.text(_none_matched(experiment, status_filter, when, counts))
        return out.exit_code
    title = f"Trials of {experiment}"
    if at is not None:
        title += f" at {next(iter(at.to_json().values()))}"
    out.table(_columns(out.wide), [_cells(r, out.wide) for r in rows], title=title)
    return out.exit_code


def _none_matched(experiment: str, status: str | None, when: str, counts: dict[str, int]) -> str:
    """One line instead of an empty table: what was asked, and what the experiment holds."""
    present = ", ".join(f"{s} {counts[s]}" for s in STATUSES if counts.get(s))
    if status is None or not present:
        return f"experiment {experiment} {'had' if when else 'has'} no trials{when or ' yet'}"
    return (f"no trial of experiment {experiment} {'had' if when else 'has'} status "
            f"{status.upper()}{when} (statuses {'then' if when else 'here'}: {present})")


def _columns(wide: bool) -> list[Column]:
    if wide:
        return [Column("trial"), Column("status", status=True),
                Column("failures", justify="right"),
                Column("restore fails (episode/total)", justify="right"),
                Column("preemptions", justify="right"), Column("last error"),
                Column("last decision"), Column("latest checkpoint")]
    return [Column("trial"), Column("status", status=True),
            Column("fails", 1, justify="right"), Column("restore", 2, justify="right"),
            Column("preempt", 4, justify="right"), Column("last error", 1, prose=True),
            Column("decision", 3), Column("checkpoint", 5)]


def _cells(r: dict[str, Any], wide: bool) -> list[Any]:
    error = ""
    if r["last_error_type"]:
        error = f"{r['last_error_type']} ({_short(r['last_error_cause'])}): " \
                f"{r['last_error_message']}"
    return [r["trial_id"], r["status"], r["num_failures"],
            f"{r['num_restore_failures']}/{r['total_restore_failures']}",
            r["num_preemptions"], error, r["last_decision"],
            r["latest_checkpoint"] if wide else basename(r["latest_checkpoint"])]


def _short(cause: str | None) -> str:
    return (cause or "").rsplit(".", 1)[-1]
