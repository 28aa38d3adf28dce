"""Each trial's head (its last seq, the position of its first event) by index probes: the
listings' cost grows with the trials, not with the events.

A ``GROUP BY trial_id`` over ``events`` reads every event of the experiment (PostgreSQL
plans it as a sequential or bitmap scan of the table once it holds millions of rows). Here a
recursive walk (a *loose index scan*) steps from one trial to the next through the
``(experiment_id, trial_id, seq)`` unique index (``min(trial_id) WHERE trial_id > the
previous``), and each trial's last seq and first event are one more probe of the same index
each: about three index descents per trial on both SQLite and PostgreSQL, whatever the
number of events per trial.

A trial's event count is its last seq: the writer appends only ``expected_seq + 1`` under the
unique ``(experiment_id, trial_id, seq)`` key, an import checks the same, and ``verify``
reports a gap in a log damaged by hand. A trial's first event is its seq-1 event (its lowest
seq); a trial's events are appended in seq order, so it is also its lowest position.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import CTE, func, select

from statemachine.log.schema import events, experiments


def trial_heads(experiment_id: int | None, *, first: bool = False) -> CTE:
    """``(experiment_id, trial_id, last_seq[, first_position])`` of every trial of the
    experiment (every experiment when ``None``), as a materialized common table expression
    named ``last``."""
    seed_probe = events.alias("seed")
    seed = select(
        experiments.c.id.label("experiment_id"),
        select(func.min(seed_probe.c.trial_id))
        .where(seed_probe.c.experiment_id == experiments.c.id)
        .scalar_subquery().label("trial_id"),
    )  # fmt: skip
    if experiment_id is not None:
        seed = seed.where(experiments.c.id == experiment_id)
    walk = seed.cte("walk", recursive=True)
    step_probe = events.alias("step")
    walk = walk.union_all(
        select(
            walk.c.experiment_id,
            select(func.min(step_probe.c.trial_id))
            .where(step_probe.c.experiment_id == walk.c.experiment_id,
                   step_probe.c.trial_id > walk.c.trial_id)
            .scalar_subquery(),
        ).where(walk.c.trial_id.is_not(None))
    )  # fmt: skip
    last_probe = events.alias("tail")
    columns: list[Any] = [
        walk.c.experiment_id, walk.c.trial_id,
        select(func.max(last_probe.c.seq))
        .where(last_probe.c.experiment_id == walk.c.experiment_id,
               last_probe.c.trial_id == walk.c.trial_id)
        .scalar_subquery().label("last_seq"),
    ]  # fmt: skip
    if first:
        first_probe = events.alias("head")
        columns.append(
            select(first_probe.c.position)
            .where(first_probe.c.experiment_id == walk.c.experiment_id,
                   first_probe.c.trial_id == walk.c.trial_id)
            .order_by(first_probe.c.seq)
            .limit(1)
            .scalar_subquery().label("first_position")
        )  # fmt: skip
    # Materialized: each probe runs once per trial, however often the query reads its column
    # (PostgreSQL would otherwise inline the subplan into every reference).
    return select(*columns).where(walk.c.trial_id.is_not(None)).cte("last").prefix_with(
        "MATERIALIZED")
