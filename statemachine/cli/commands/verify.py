"""``trial-replay verify [EXP]``: does the fold reproduce every recorded status and decision?"""

from __future__ import annotations

from typing import Any

import click

from statemachine.cli.db import open_store
from statemachine.cli.output import Output, json_option
from statemachine.cli.reading import require_experiment
from statemachine.cli.safe_text import one_line

#: Exit code of a log that does not replay.
EXIT_DIVERGED = 1


def _result(result: Any) -> dict[str, Any]:
    d = result.divergence
    return {
        "experiment": result.experiment,
        "ok": result.ok,
        "trials": result.trials,
        "events": result.events,
        "snapshots_checked": result.snapshots_checked,
        "divergence": None if d is None else {
            "position": d.position, "trial_id": d.trial_id, "seq": d.seq, "field": d.field,
            "recorded": d.recorded, "replayed": d.replayed, "text": d.describe(),
        },
        "gaps": [{"trial_id": g.trial_id, "after_seq": g.after_seq, "next_seq": g.next_seq}
                 for g in result.gaps],
    }


@click.command("verify")
@click.argument("experiment", required=False)
@click.option("--machine", is_flag=True,
              help="Fold through the transitions Machine itself (the definition) instead of "
                   "the table compiled from it: the same checks, about ten times slower.")
@json_option
@click.pass_obj
def verify(out: Output, experiment: str | None, machine: bool, as_json: bool) -> int:
    """Replay every event (of EXP, or of every experiment) through the state machine and
    check that each recorded status, decision and counters are reproduced and that sequence
    numbers have no gaps. Exit 0 if so; otherwise exit 1 and print the first divergence."""
    from statemachine.log import verify as verify_log

    with open_store(out.db) as store:
        if experiment is not None:
            require_experiment(store, experiment)
            names = [experiment]
        else:
            names = [info.name for info in store.list_experiments()]
        results = [_result(verify_log(store, name, machine=machine)) for name in names]
    ok = all(r["ok"] for r in results)
    if as_json:
        out.json({"ok": ok, "experiments": results})
    else:
        for r in results:
            if r["ok"]:
                out.text(f"{r['experiment']}: OK: {r['events']} events of {r['trials']} trials "
                         f"replayed to the recorded statuses, decisions and counters; no seq "
                         f"gaps; {r['snapshots_checked']} snapshots match")
                continue
            if r["divergence"] is not None:
                out.text(f"{r['experiment']}: DIVERGED at {r['divergence']['text']}")
            for g in r["gaps"]:
                out.text(f"{r['experiment']}: GAP in trial {g['trial_id']!r}: seq "
                         f"{g['after_seq']} is followed by seq {g['next_seq']}")
    if not ok:
        first = next(r for r in results if not r["ok"])
        where = (first["divergence"]["text"] if first["divergence"] is not None
                 else f"a seq gap in trial {first['gaps'][0]['trial_id']!r}")
        click.echo(one_line(f"trial-replay: verify failed: {first['experiment']}: {where}"),
                   err=True)
        return EXIT_DIVERGED
    return out.exit_code
