"""Each trial's head (its last seq, the position of its first event) by index: the listings'
cost grows with the trials, not with the events.

A ``GROUP BY trial_id`` over ``events`` reads every event of the experiment (PostgreSQL
plans it as a sequential, bitmap or full index scan once the table holds millions of rows).
Here the trials are read from ``ix_events_firsts`` (revision 0005), a partial index holding
only each trial's first event (``seq = 1``) with its position, one entry per trial; each
trial's last seq is one probe of the ``(experiment_id, trial_id, seq)`` unique index (a
backward index-only scan of one entry on PostgreSQL, SQLite's min/max optimisation). A log
not yet upgraded to 0005 answers the same, through a scan.

A trial's event count is its last seq: the writer appends only ``expected_seq + 1`` (from 0)
under the unique ``(experiment_id, trial_id, seq)`` key, an import checks the same, and
``verify`` reports a gap in a log damaged by hand. A trial's events are appended in seq order,
so its seq-1 event is also its lowest position.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import CTE, func, select, text

from statemachine.log.schema import FIRSTS_WHERE, events


def trial_heads(experiment_id: int | None, *, first: bool = False) -> CTE:
    """``(experiment_id, trial_id, last_seq[, first_position])`` of every trial of the
    experiment (every experiment when ``None``), as a materialized common table expression
    named ``last``."""
    starts = events.alias("starts")
    tail = events.alias("tail")
    columns: list[Any] = [
        starts.c.experiment_id, starts.c.trial_id,
        select(func.max(tail.c.seq))
        .where(tail.c.experiment_id == starts.c.experiment_id,
               tail.c.trial_id == starts.c.trial_id)
        .scalar_subquery().label("last_seq"),
    ]  # fmt: skip
    if first:
        columns.append(starts.c.position.label("first_position"))
    # The partial index's own predicate, as literal text: SQLite uses a partial index only
    # for a WHERE that names its terms (not bound parameters).
    query = select(*columns).where(text(f"starts.{FIRSTS_WHERE}"))
    if experiment_id is not None:
        query = query.where(starts.c.experiment_id == experiment_id)
    # Materialized: each probe runs once per trial, however often the query reads its column
    # (PostgreSQL would otherwise inline the subplan into every reference).
    return query.cte("last").prefix_with("MATERIALIZED")
