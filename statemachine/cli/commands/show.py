"""``trial-replay show EXP TRIAL``: a trial's timeline, event by event, as recorded."""

from __future__ import annotations

from typing import Any

import click

from statemachine.cli.db import open_store
from statemachine.cli.output import Column, Output, clock_time, json_option, wide_option
from statemachine.cli.provenance import reconstructed_note, with_provenance
from statemachine.cli.reading import (
    damage_message,
    describe_sessions,
    experiment_and_trial,
    require_trial,
)
from statemachine.cli.schema import event_row
from statemachine.domain.nodes import NodeRef, short_node_id
from statemachine.exceptions import EventDecodeError


@click.command("show")
@click.argument("experiment", required=False)
@click.argument("trial_id", metavar="TRIAL", required=False)
@json_option
@wide_option
@click.pass_obj
def show(out: Output, experiment: str | None, trial_id: str | None, as_json: bool) -> int:
    """The trial's timeline: position, time, driver epoch, event, typed error, status
    before -> after, decision, counters after."""
    with open_store(out.db) as store:
        experiment, trial_id = require_trial(store, *experiment_and_trial(experiment, trial_id))
        stored = store.read_trial(experiment, trial_id)
        rows = [event_row(r) for r in stored]
        sessions = store.list_sessions(experiment)
    for row in stored:  # a corrupted row is shown with its recorded columns, and named
        try:
            row.event  # noqa: B018 - decoding is the check
            row.counters  # noqa: B018
        except EventDecodeError as exc:
            out.warn(f"{exc}; the row is shown with its recorded columns")
        if row.damage is not None:
            out.warn(damage_message(row))
    epochs = {r["epoch"] for r in rows}
    if as_json:
        out.json(with_provenance({"experiment": experiment, "trial_id": trial_id,
                                  "events": rows}, sessions, epochs))
        return out.exit_code
    days = {(r["recorded_at"] or "")[:10] for r in rows}
    one_day = not out.wide and len(days) == 1
    title = f"Trial {trial_id} of {experiment}"
    if one_day:
        title += f", {days.pop()} (times UTC)"
    out.table(_columns(out.wide), [_cells(r, out.wide, one_day) for r in rows], title=title)
    out.text("Driver sessions: " + describe_sessions(s for s in sessions if s.epoch in epochs))
    note = reconstructed_note(sessions, epochs)
    if note:
        out.text(note)
    return out.exit_code


def _columns(wide: bool) -> list[Column]:
    if wide:
        return [Column("pos", justify="right"), Column("seq", justify="right"),
                Column("time (UTC)"), Column("epoch", justify="right"), Column("event"),
                Column("error"), Column("status"), Column("decision"),
                Column("failures", justify="right"), Column("restore (ep/total)", justify="right"),
                Column("preempt", justify="right"), Column("node")]
    # A failure row without its error type says nothing: at 80 columns the type and the
    # decision stay and the time goes; the cause (the exception's class) needs more room.
    return [Column("pos", 7, justify="right"), Column("seq", justify="right"),
            Column("time", 2), Column("epoch", 3, justify="right"), Column("event"),
            Column("error", 1), Column("cause", 4), Column("status"), Column("decision", 1),
            Column("fails", 5, justify="right"), Column("restore", 6, justify="right"),
            Column("preempt", 8, justify="right"), Column("node", 3)]


def _cells(r: dict[str, Any], wide: bool, one_day: bool) -> list[Any]:
    moment = clock_time(r["recorded_at"])
    if wide:
        errors = [f"{r['error_type']}: {r['error_cause']}" if r["error_type"] else ""]
    else:
        errors = [r["error_type"] or "", (r["error_cause"] or "").rsplit(".", 1)[-1]
                  if r["error_type"] else ""]
    return [
        r["position"], r["seq"], moment[11:] if one_day else moment, r["epoch"], r["event"],
        *errors,
        f"{r['status_before']} -> {r['status_after']}", r["decision"],
        *_counters(r["counters"]), _node(r["node"], wide),
    ]


def _node(node: dict[str, str | None] | None, wide: bool) -> str:
    """A node as the table shows it: its IP (else hostname), with ``--wide`` the start of its
    id too."""
    if not node:
        return ""
    try:
        ref = NodeRef.from_dict(node)
    except EventDecodeError:
        return ""
    if not ref.known:
        return ""
    if wide:
        return ref.describe().removeprefix("node ")
    return ref.node_ip or ref.hostname or short_node_id(ref.node_id) or ""


def _counters(counters: dict[str, int] | None) -> list[str]:
    if not counters:
        return ["", "", ""]
    return [
        str(counters.get("failures", "")),
        f"{counters.get('restore_failures', '')}/{counters.get('total_restore_failures', '')}",
        str(counters.get("preemptions", "")),
    ]
