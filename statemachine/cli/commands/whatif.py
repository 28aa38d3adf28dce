"""``trial-replay what-if EXP``: the same events under another retry policy."""

from __future__ import annotations

from typing import Any

import click

from statemachine.cli.db import BadInput, open_store
from statemachine.cli.output import Column, Output, counted, json_option, wide_option
from statemachine.cli.params import CauseBudgetType, CauseRuleType, RepeatsType, count
from statemachine.cli.reading import decode_trial, require_experiment, require_trial
from statemachine.cli.whatif import hypothetical, json_changes
from statemachine.cli.whatif import what_if as replay_what_if
from statemachine.domain.policy import ExhaustionAction, RestorePhase, RetryPolicy


@click.command("what-if")
@click.argument("experiment", required=False)
@click.option("--max-failures", type=count(-(2**31), 2**31 - 1),
              help="Hypothetical max_failures (negative: unlimited).")
@click.option("--restore-retry-num", type=count(0, 2**31 - 1),
              help="Hypothetical restore retries per checkpoint.")
@click.option("--on-restore-exhausted", type=click.Choice([a.value for a in ExhaustionAction]),
              help="Hypothetical action once the restore retries are spent.")
@click.option("--count-preemption-as-failure/--no-count-preemption-as-failure", default=None,
              help="Hypothetically count preemptions as failures (or not).")
@click.option("--avoid-failed-nodes/--no-avoid-failed-nodes", default=None,
              help="Hypothetically place restore retries away from the nodes where the "
                   "restore already failed (or not).")
@click.option("--restore-phase", type=click.Choice([p.value for p in RestorePhase]),
              help="Hypothetical restore phase: until_first_report makes a failure after a "
                   "restore and before the attempt's first result a restore failure.")
@click.option("--on-cause", "on_cause", multiple=True, type=CauseRuleType(),
              help="Hypothetically decide an actor death of CAUSE by ACTION: count, "
                   "retry_not_counted or give_up (repeatable; merged into the policy's own).")
@click.option("--cause-budget", "cause_budgets", multiple=True, type=CauseBudgetType(),
              help="Hypothetically retry at most N failures of CAUSE uncounted (its action "
                   "must be retry_not_counted; repeatable).")
@click.option("--give-up-on-repeats", type=RepeatsType(),
              help="Hypothetically give up after N identical failures in a row at the same "
                   "training iteration (N >= 2), or off.")
@click.option("--trial", "trial_ids", multiple=True, metavar="TRIAL",
              help="Only these trials (repeatable).")
@json_option
@wide_option
@click.pass_obj
def what_if(
    out: Output,
    experiment: str | None,
    max_failures: int | None,
    restore_retry_num: int | None,
    on_restore_exhausted: str | None,
    count_preemption_as_failure: bool | None,
    avoid_failed_nodes: bool | None,
    restore_phase: str | None,
    on_cause: tuple[tuple[str, str], ...],
    cause_budgets: tuple[tuple[str, int], ...],
    give_up_on_repeats: int | None,
    trial_ids: tuple[str, ...],
    as_json: bool,
) -> int:
    """Replay the experiment's events under another policy: per trial the recorded outcome
    beside the hypothetical one. Events that could not have happened under the new policy
    are cut where the hypothetical trial ends, and said so."""
    changes: dict[str, Any] = {
        name: value
        for name, value in (
            ("max_failures", max_failures),
            ("restore_retry_num", restore_retry_num),
            ("on_restore_exhausted", on_restore_exhausted),
            ("count_preemption_as_failure", count_preemption_as_failure),
            ("avoid_failed_nodes", avoid_failed_nodes),
            ("restore_phase", restore_phase),
        )
        if value is not None
    }
    if on_cause:
        changes["on_cause"] = dict(on_cause)
    if cause_budgets:
        changes["cause_budgets"] = dict(cause_budgets)
    if give_up_on_repeats is not None:
        changes["give_up_on_repeats"] = give_up_on_repeats or None
    if not changes:
        raise BadInput(
            "what-if needs at least one policy change: --max-failures, --restore-retry-num, "
            "--on-restore-exhausted, --[no-]count-preemption-as-failure, "
            "--[no-]avoid-failed-nodes, --restore-phase, --on-cause, --cause-budget or "
            "--give-up-on-repeats"
        )
    hypothetical(RetryPolicy(), changes)  # validate now: one clear line naming the field
    with open_store(out.db) as store:
        experiment = require_experiment(store, experiment)
        trial_ids = tuple(require_trial(store, experiment, t)[1] for t in trial_ids)
        # a trial at a time (memory holds one trial's events, not the experiment's), shown
        # in order of first appearance in the log
        placed = sorted(
            ((rows[0].position,
              replay_what_if(tid, [e for _, e in decode_trial(rows, out)], changes))
             for tid, rows in store.read_trials(experiment, trial_ids or None)),
            key=lambda pair: pair[0])
        results = [result for _, result in placed]
    if as_json:
        out.json({
            "experiment": experiment,
            "changes": json_changes(changes),
            "trials": [r.to_dict() for r in results],
        })
        return out.exit_code
    described = ", ".join(
        f"{k}={v}" if not isinstance(v, dict) else
        f"{k} " + " ".join(f"{c}={a}" for c, a in v.items())
        for k, v in json_changes(changes).items())
    if not results:  # --trial names only trials that exist: none means no trial at all
        out.text(f"experiment {experiment} has no trials yet: nothing to replay with {described}")
        return out.exit_code
    out.table(
        [Column("trial"), Column("recorded", prose=True), Column("hypothetical", prose=True),
         Column("changed", 2), Column("note", 1, prose=True)],
        [[r.trial_id, _outcome(r.recorded), _outcome(r.hypothetical),
          "yes" if r.changed else "", r.note] for r in results],
        title=f"What if {described} in {experiment}",
    )
    return out.exit_code


def _outcome(side: dict[str, Any]) -> str:
    """``TERMINATED (recovered, 1 failure)``."""
    return f"{side['status']} ({side['outcome']}, {counted(side['num_failures'], 'failure')})"
