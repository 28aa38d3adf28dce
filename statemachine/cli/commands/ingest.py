"""``trial-replay ingest RAY_EXPERIMENT_DIR``: a history for an experiment run without the
callback, reconstructed from the files Ray Tune wrote."""

from __future__ import annotations

from typing import Any

import click

from statemachine.cli.output import Column, Output, json_option, wide_option
from statemachine.ingest import IngestResult, ingest_experiment


@click.command("ingest")
@click.argument("folder", metavar="RAY_EXPERIMENT_DIR")
@click.option("--name", metavar="NAME",
              help="Record the experiment under this name (default: the folder's name).")
@json_option
@wide_option
@click.pass_obj
def ingest(out: Output, folder: str, name: str | None, as_json: bool) -> int:
    """Reconstruct the history of a Ray Tune experiment that ran without the callback from
    the files Ray wrote (experiment_state-*.json, each trial's params.json, result.json,
    error.txt and checkpoint folders; never a pickle), and record it in the --db log
    (default: where the callback keeps its log: statemachine.db in a local experiment
    folder; for s3://... its local log in ~/ray_results/). Every view then says the history
    is reconstructed and what it cannot know. Running it again after the experiment went on
    adds only what is new; an experiment the callback recorded is refused (its log is
    complete)."""
    result = ingest_experiment(folder, db=out.db, name=name, warn=out.warn)
    if as_json:
        out.json(result.to_dict())
        return out.exit_code
    _print(out, result)
    return out.exit_code


def _print(out: Output, result: IngestResult) -> None:
    data = result.to_dict()
    trials = data["trials"]
    if result.epoch is None:
        out.text(f"Nothing new in {result.source}: the log at {result.log} already holds "
                 f"what its files say of {len(trials)} trial(s) of {result.experiment!r}.")
    else:
        new = sum(1 for t in trials if t["new"])
        out.text(f"Ingested {result.source} into {result.log} as {result.experiment!r} "
                 f"(epoch {result.epoch}): {data['events_added']} events for "
                 f"{len(trials)} trial(s), {new} new.")
    policy = result.plan.policy
    out.text(f"Policy recorded: max_failures={policy.max_failures}, restore_retry_num="
             f"{policy.restore_retry_num} (TUNE_RESTORE_RETRY_NUM is saved nowhere: the most "
             "restore failures error.txt shows without counting).")
    out.table(_columns(), [_cells(t) for t in trials],
              title=f"Trials of {result.experiment} (reconstructed) against Ray's newest state")
    for t in trials:
        if t["disagreement"]:
            out.text(f"Trial {t['trial_id']}: the log and Ray's state differ "
                     f"({t['disagreement']}).")
        for late in t["not_added"]:
            out.text(f"Trial {t['trial_id']}: not added: {late} (the log already holds "
                     "later events).")
    if data["skipped_state_files"]:
        out.text("Skipped: " + ", ".join(f"{s['file']} ({s['reason']})"
                                         for s in data["skipped_state_files"]))
    if data["not_read"]:
        shown = data["not_read"][:4]
        more = len(data["not_read"]) - len(shown)
        out.text("Not read (pickles run code when loaded): " + ", ".join(shown)
                 + (f" and {more} more" if more > 0 else "") + ".")
    out.text(f"Read it with: trial-replay --db {result.log} explain {result.experiment} TRIAL")


def _columns() -> list[Column]:
    return [Column("trial"), Column("status", status=True),
            Column("failures", justify="right"), Column("Ray's status", 1),
            Column("Ray's failures", 1, justify="right"),
            Column("Failure # headers", 2, justify="right"),
            Column("events added", 3, justify="right")]


def _cells(t: dict[str, Any]) -> list[Any]:
    return [t["trial_id"], t["status"], t["num_failures"], t["ray_status"] or "",
            "" if t["ray_num_failures"] is None else t["ray_num_failures"],
            t["failure_headers"], t["events_added"]]
