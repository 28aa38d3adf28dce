"""``trial-replay experiments``: every experiment, its trials per status and driver sessions."""

from __future__ import annotations

from collections import Counter
from typing import Any

import click

from statemachine.cli.db import open_store
from statemachine.cli.output import Column, Output, json_option, relative_time, wide_option
from statemachine.cli.reading import read_model, session_ends
from statemachine.cli.schema import STATUSES, experiment_row, session_row


@click.command("experiments")
@json_option
@wide_option
@click.pass_obj
def experiments(out: Output, as_json: bool) -> int:
    """List experiments: trial counts per status, driver sessions (epochs, clean or crashed
    ends), first and last event, earlier names of a moved or renamed experiment."""
    rows = []
    with open_store(out.db) as store:
        for summary in read_model(store, out).experiments():
            info, counts = summary.info, summary.status_counts
            sessions = store.list_sessions(info.name)
            ends = session_ends(sessions)
            first = next(iter(store.read_experiment(info.name, limit=1)), None)
            rows.append(experiment_row(
                info, counts,
                [session_row(s, ends[s.epoch]) for s in sorted(sessions, key=lambda s: s.epoch)],
                first.recorded_at_known if first is not None else None,
                store.experiment_renames(info.name),
            ))
    if as_json:
        out.json(rows)
        return out.exit_code
    if not rows:
        out.text("No experiments in this event log.")
        return out.exit_code
    out.table(_columns(out.wide), [_cells(r, out.wide) for r in rows], title="Experiments")
    return out.exit_code


def _columns(wide: bool) -> list[Column]:
    if wide:
        return [Column("experiment"), Column("trials", justify="right"),
                *(Column(s, justify="right") for s in STATUSES),
                Column("events", justify="right"), Column("sessions"),
                Column("first event"), Column("last event")]
    return [Column("experiment"), Column("trials", justify="right"),
            Column("statuses", priority=1, prose=True), Column("events", 3, justify="right"),
            Column("sessions", 2), Column("first event", 4), Column("last event", 1)]


def _cells(r: dict[str, Any], wide: bool) -> list[Any]:
    sessions = r["sessions"]
    name = r["name"] + "".join(f" (was {old['name']})" for old in r["renamed_from"])
    if wide:
        return [name, r["trials"], *(r["status_counts"][s] for s in STATUSES),
                r["events"], ", ".join(f"{s['epoch']}:{s['end']}" for s in sessions),
                r["first_event_at"], r["last_event_at"]]
    statuses = ", ".join(f"{n} {s}" for s, n in r["status_counts"].items() if n)
    ends = Counter(s["end"] for s in sessions)
    detail = ", ".join(f"{n} {end}" for end, n in ends.items() if end != "clean")
    return [name, r["trials"], statuses, r["events"],
            f"{len(sessions)} ({detail})" if detail else str(len(sessions)),
            relative_time(r["first_event_at"]), relative_time(r["last_event_at"])]
