"""Each trial's first event has an index of its own: the listings find every trial (and
where it starts) in one pass over as many index entries as there are trials.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02

``ix_events_firsts``: a partial index of the events with ``seq = 1`` (a trial's first
event: the writer appends ``expected_seq + 1`` from 0), on ``(experiment_id, trial_id,
position)``. Creating it fills it from the existing events; a log without it still reads
(the same queries, through a scan).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | None = None
depends_on: str | None = None

_FIRSTS = "seq = 1"


def upgrade() -> None:
    """Create the trials' first events' index."""
    op.create_index("ix_events_firsts", "events", ["experiment_id", "trial_id", "position"],
                    sqlite_where=sa.text(_FIRSTS), postgresql_where=sa.text(_FIRSTS))


def downgrade() -> None:
    """Drop it."""
    op.drop_index("ix_events_firsts", table_name="events")
