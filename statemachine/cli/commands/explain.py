"""``trial-replay explain EXP TRIAL``: why the trial is where it is, in plain words."""

from __future__ import annotations

import click

from statemachine.cli.db import open_store
from statemachine.cli.explain import Explanation, describe_policy, explain_trial
from statemachine.cli.output import Output, json_option
from statemachine.cli.provenance import reconstructed_note, with_provenance
from statemachine.cli.reading import (
    decode_trial,
    experiment_and_trial,
    require_trial,
    session_ends,
    session_kinds,
)


@click.command("explain")
@click.argument("experiment", required=False)
@click.argument("trial_id", metavar="TRIAL", required=False)
@json_option
@click.pass_obj
def explain(out: Output, experiment: str | None, trial_id: str | None, as_json: bool) -> int:
    """Why the trial ended where it did: each failure numbered (``Restore failure # k (retry k
    of R)``), the decision each time and the policy that applied."""
    with open_store(out.db) as store:
        experiment, trial_id = require_trial(store, *experiment_and_trial(experiment, trial_id))
        decoded = decode_trial(store.read_trial(experiment, trial_id), out)
        sessions = store.list_sessions(experiment)
    explanation = explain_trial(trial_id, decoded, session_ends(sessions),
                                session_kinds(sessions))
    epochs = {stored.epoch for stored, _ in decoded}
    if as_json:
        out.json(with_provenance(explanation.to_dict(experiment), sessions, epochs))
        return out.exit_code
    print_explanation(out, explanation)
    note = reconstructed_note(sessions, epochs)
    if note:
        out.text()
        out.text(note)
    return out.exit_code


def print_explanation(out: Output, explanation: Explanation) -> None:
    """The explanation for people: summary, policy, then one wrapped line per step."""
    out.text(explanation.summary, style="bold")
    out.text(f"Policy that applied: {describe_policy(explanation.state.policy)}.")
    out.text()
    out.lines(
        (
            (f"seq {step.seq:>3}" if step.position is not None else " " * 7)
            + (f" epoch {step.epoch}" if step.epoch is not None else ""),
            step.text,
        )
        for step in explanation.steps
    )
