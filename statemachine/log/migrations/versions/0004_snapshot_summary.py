"""Snapshots carry a summary of their state, so listings filter and count in SQL; the
attempts have an index of their own.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02

``snapshots.status``, ``failures``, ``total_restore_failures``, ``preemptions`` and
``error_type`` (the kind of the last failure): what the read model
(``statemachine/log/read``) filters, counts and orders by without decoding each state. They
repeat fields of ``state`` and are written with it; a snapshot is still only a cache, trusted
under its ``machine_version`` alone. The upgrade fills them in from each stored state (read
in batches, in Python, so a state that does not decode is simply left NULL: the read model
decodes such a row, or folds its trial from its events, which is slower, never wrong).

``ix_events_attempts``: a partial index of the starts and failures (``TrialStarted``,
``TrialFailed``, ``DeathCauseLearned``) by experiment and position, what ``trial-replay
nodes`` reads instead of every event.
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None

def _columns() -> tuple[sa.Column[Any], ...]:
    return (
        sa.Column("status", sa.String(length=16), nullable=True),
        sa.Column("failures", sa.Integer(), nullable=True),
        sa.Column("total_restore_failures", sa.Integer(), nullable=True),
        sa.Column("preemptions", sa.Integer(), nullable=True),
        sa.Column("error_type", sa.String(length=64), nullable=True),
    )


_COLUMNS = _columns()

# The table as this revision knows it (frozen here: never the live model).
_snapshots = sa.table(
    "snapshots",
    sa.column("experiment_id", sa.Integer()),
    sa.column("trial_id", sa.String()),
    sa.column("state", sa.Text()),
    *(sa.column(c.name, c.type) for c in _COLUMNS),
)

_BATCH = 2_000
_ATTEMPTS = "type_name IN ('TrialStarted', 'TrialFailed', 'DeathCauseLearned')"


def upgrade() -> None:
    """Add the summary columns and fill them in from every snapshot's state."""
    for column in _columns():
        op.add_column("snapshots", column)
    op.create_index("ix_events_attempts", "events", ["experiment_id", "position"],
                    sqlite_where=sa.text(_ATTEMPTS), postgresql_where=sa.text(_ATTEMPTS))
    bind = op.get_bind()
    update = (
        sa.update(_snapshots)
        .where(_snapshots.c.experiment_id == sa.bindparam("e"),
               _snapshots.c.trial_id == sa.bindparam("t"))
        .values({c.name: sa.bindparam(f"v_{c.name}") for c in _COLUMNS})
    )
    last: tuple[int, str] = (-1, "")
    while True:
        rows = bind.execute(
            sa.select(_snapshots.c.experiment_id, _snapshots.c.trial_id, _snapshots.c.state)
            .where(sa.tuple_(_snapshots.c.experiment_id, _snapshots.c.trial_id)
                   > sa.tuple_(sa.literal(last[0]), sa.literal(last[1])))
            .order_by(_snapshots.c.experiment_id, _snapshots.c.trial_id)
            .limit(_BATCH)
        ).all()
        if not rows:
            return
        values = [v for v in (_summary(e, t, text) for e, t, text in rows) if v is not None]
        if values:
            bind.execute(update, values)
        last = (rows[-1][0], rows[-1][1])


def _summary(experiment_id: int, trial_id: str, text: str) -> dict[str, Any] | None:
    """The summary values of one stored state (``None``: it does not decode)."""
    try:
        state = json.loads(text)
        error = state.get("last_error")
        values = {
            "v_status": state["status"],
            "v_failures": state["failures"],
            "v_total_restore_failures": state["total_restore_failures"],
            "v_preemptions": state["preemptions"],
            "v_error_type": error.get("kind") if isinstance(error, dict) else None,
        }
    except (TypeError, ValueError, KeyError, AttributeError):
        return None
    if not (isinstance(values["v_status"], str) and len(values["v_status"]) <= 16
            and all(type(values[k]) is int for k in
                    ("v_failures", "v_total_restore_failures", "v_preemptions"))
            and (values["v_error_type"] is None
                 or (isinstance(values["v_error_type"], str)
                     and len(values["v_error_type"]) <= 64))):
        return None
    return {"e": experiment_id, "t": trial_id, **values}


def downgrade() -> None:
    """Drop the summary columns and the attempts' index."""
    op.drop_index("ix_events_attempts", table_name="events")
    with op.batch_alter_table("snapshots") as batch:
        for column in reversed(_COLUMNS):
            batch.drop_column(column.name)
