"""``trial-replay show EXP TRIAL``: a trial's timeline, event by event, as recorded."""

from __future__ import annotations

import click

from statemachine.cli.db import open_store
from statemachine.cli.output import Output, json_option
from statemachine.cli.reading import require_trial
from statemachine.cli.schema import event_row
from statemachine.domain.nodes import NodeRef
from statemachine.exceptions import EventDecodeError


@click.command("show")
@click.argument("experiment")
@click.argument("trial_id", metavar="TRIAL")
@json_option
@click.pass_obj
def show(out: Output, experiment: str, trial_id: str, as_json: bool) -> int:
    """The trial's timeline: position, time, driver epoch, event, typed error, status
    before -> after, decision, counters after."""
    with open_store(out.db) as store:
        require_trial(store, experiment, trial_id)
        stored = store.read_trial(experiment, trial_id)
        rows = [event_row(r) for r in stored]
    for row in stored:  # a corrupted row is shown with its recorded columns, and named
        try:
            row.event  # noqa: B018 - decoding is the check
            row.counters  # noqa: B018
        except EventDecodeError as exc:
            out.warn(f"{exc}; the row is shown with its recorded columns")
    if as_json:
        out.json({"experiment": experiment, "trial_id": trial_id, "events": rows})
        return out.exit_code
    out.table(
        ["pos", "seq", "time (UTC)", "epoch", "event", "error", "status", "decision",
         "failures", "restore (ep/total)", "preempt", "node"],
        [
            [
                r["position"], r["seq"], (r["recorded_at"] or "")[:23].replace("T", " "),
                r["epoch"], r["event"],
                f"{r['error_type']}: {r['error_cause']}" if r["error_type"] else "",
                f"{r['status_before']} -> {r['status_after']}", r["decision"],
                *_counters(r["counters"]), _node(r["node"]),
            ]
            for r in rows
        ],
        title=f"Trial {trial_id} of {experiment}",
        status_column=None,
    )
    return out.exit_code


def _node(node: dict[str, str | None] | None) -> str:
    """A node as the table shows it: its IP (else hostname) and the start of its id."""
    if not node:
        return ""
    try:
        ref = NodeRef.from_dict(node)
    except EventDecodeError:
        return ""
    return ref.describe().removeprefix("node ") if ref.known else ""


def _counters(counters: dict[str, int] | None) -> list[str]:
    if not counters:
        return ["", "", ""]
    return [
        str(counters.get("failures", "")),
        f"{counters.get('restore_failures', '')}/{counters.get('total_restore_failures', '')}",
        str(counters.get("preemptions", "")),
    ]
