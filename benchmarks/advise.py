"""Section ``advise``: a sweep of 100 retry policies over a 10,000-trial experiment.

The experiment (10,000 trials; 1,000 under ``--quick``) is a run of a known failure model
(benchmarks/advise_model.py: a training hazard and preemptions of 0.02 per hour, restores
that work 80% of the time, three trials that fail deterministically) under Ray's default
policy, written to SQLite through the store's API. The sweep varies restore_retry_num 0..4,
max_failures 0..4, avoid_failed_nodes and on_restore_exhausted (retry_checkpoint,
restart_from_scratch): 100 policies. Paths, on the same histories:

- the baseline: one ``what-if`` per policy, every trial refolded (what a user scripting
  what-if would run; it simulates nothing), measured on 2 policies and scaled to 100;
- ours: ``advise`` from the log (read, estimates, the sweep: a trial that never failed is
  not refolded, a continuation is drawn once for every policy that leaves the trial in the
  same state), single process and with ``jobs=2``; its CPU time is shown beside (on a
  loaded machine the wall time is the machine's, the CPU time is ours: the target is judged
  on the CPU time of the whole advise, which on two free cores bounds its wall time).
"""

from __future__ import annotations

import time

from benchmarks.advise_model import FailureModel, generate, write
from benchmarks.harness import Context, Stat
from statemachine import EventStore, RetryPolicy
from statemachine.advise import Grid, advise
from statemachine.advise.reader import read_histories
from statemachine.cli.whatif import what_if
from statemachine.domain.policy import ExhaustionAction

EXPERIMENT = "advise"
TARGET_S = 60.0
GRID = Grid(restore_retry_num=(0, 1, 2, 3, 4), max_failures=(0, 1, 2, 3, 4),
            avoid_failed_nodes=(False, True),
            on_restore_exhausted=(ExhaustionAction.RETRY_CHECKPOINT,
                                  ExhaustionAction.RESTART_FROM_SCRATCH))


def _timed(work: object) -> tuple[float, float]:
    """Wall and CPU seconds of ``work()`` (CPU: this process and its finished children)."""
    import os

    def cpu() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    wall, used = time.perf_counter(), cpu()
    work()  # type: ignore[operator]
    return time.perf_counter() - wall, cpu() - used


def _load() -> str:
    import os

    return f"{os.getloadavg()[0]:.1f}"


def run(ctx: Context) -> None:
    """Measure and print the ``advise`` table."""
    trials = ctx.size(10_000, 1_000)
    model = FailureModel(trials=trials, hazard_per_h=0.02, preempt_per_h=0.02, restore_p=0.8,
                         deterministic=3, policy=RetryPolicy())
    url = ctx.sqlite_url("advise")
    store = EventStore.open(url)
    try:
        events = write(store, EXPERIMENT, generate(model, 1), model.policy)
        changes = GRID.changes()
        assert len(changes) == 100
        histories = read_histories(store, [EXPERIMENT]).histories
        rounds = 1 if not ctx.quick else 2
        results: dict[str, list[tuple[float, float]]] = {
            "what-if": [], "advise": [], "advise2": [], "read": []}
        for _ in range(rounds):
            results["what-if"].append(_timed(lambda: [
                what_if(h.trial_id, h.events, c) for c in changes[:2] for h in histories]))
            results["read"].append(_timed(lambda: read_histories(store, [EXPERIMENT])))
            results["advise"].append(_timed(lambda: advise(
                read_histories(store, [EXPERIMENT]).histories, GRID, seed=1)))
            results["advise2"].append(_timed(lambda: advise(
                read_histories(store, [EXPERIMENT]).histories, GRID, seed=1, jobs=2)))
        advice = advise(histories, GRID, seed=1)
    finally:
        store.close()

    def stat(name: str, scale: float = 1.0) -> Stat:
        return Stat.of([w * scale for w, _ in results[name]])

    def cpu(name: str) -> float:
        return min(c for _, c in results[name])

    base = stat("what-if", 50.0)
    table = ctx.report.table(
        "advise", f"advise: 100 policies over {trials:,} trials ({events:,} events, "
        f"{advice.estimates.errored} ended ERROR, {advice.samples} samples)", "s")
    table.add("what-if per policy, every trial refolded (2 policies x 50; baseline)", base)
    table.add("advise: read the log into histories", stat("read"), versus=base)
    one = stat("advise")
    table.add("advise: read, estimates, sweep of 100 policies (1 process)", one, versus=base,
              note=f"CPU {cpu('advise'):.1f} s")
    two = stat("advise2")
    used = cpu("advise2")
    table.add("advise --jobs 2", two, versus=base,
              target=f"<= {TARGET_S:.0f} s on 2 cores (CPU s)", ok=used <= TARGET_S,
              measured=f"CPU {used:.1f} s (wall {two.median:.1f} s, load {_load()})")
    table.note("The baseline simulates nothing: where a policy retries past the end of the "
               "record it stops, where advise draws the continuation (and still costs less: "
               "trials that never failed are not refolded).")
    ctx.report.print_table(table)
