"""``trial-replay experiments``: every experiment, its trials per status and driver sessions."""

from __future__ import annotations

from collections import Counter

import click

from statemachine.cli.db import open_store
from statemachine.cli.output import Output, json_option
from statemachine.cli.reading import fold_states, session_ends
from statemachine.cli.schema import STATUSES, experiment_row, session_row


@click.command("experiments")
@json_option
@click.pass_obj
def experiments(out: Output, as_json: bool) -> int:
    """List experiments: trial counts per status, driver sessions (epochs, clean or crashed
    ends), first and last event."""
    rows = []
    with open_store(out.db) as store:
        for info in store.list_experiments():
            counts = Counter(s.status.value for s in fold_states(store, info.name, out))
            sessions = store.list_sessions(info.name)
            ends = session_ends(sessions)
            first = next(iter(store.read_experiment(info.name, limit=1)), None)
            rows.append(experiment_row(
                info, dict(counts),
                [session_row(s, ends[s.epoch]) for s in sorted(sessions, key=lambda s: s.epoch)],
                first.recorded_at if first is not None else None,
            ))
    if as_json:
        out.json(rows)
        return out.exit_code
    if not rows:
        out.text("No experiments in this event log.")
        return out.exit_code
    out.table(
        ["experiment", "trials", *STATUSES, "events", "sessions", "first event", "last event"],
        [
            [
                r["name"], r["trials"], *(r["status_counts"][s] for s in STATUSES), r["events"],
                ", ".join(f"{s['epoch']}:{s['end']}" for s in r["sessions"]),
                r["first_event_at"], r["last_event_at"],
            ]
            for r in rows
        ],
        title="Experiments",
        status_column=None,
    )
    return out.exit_code
