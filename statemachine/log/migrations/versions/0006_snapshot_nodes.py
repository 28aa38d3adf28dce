"""Snapshots keep their trial's share of the per-node tally: ``trial-replay nodes`` sums
one small value per trial instead of reading every start and failure of the experiment.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-07

``snapshots.nodes``: the trial's per-node share at the snapshot's ``seq`` (JSON, written with
the state; see ``statemachine/domain/node_tally.py``). Existing rows are left NULL (filling
them in would fold every trial's history in the upgrade): the read model reads those
trials' attempts instead, as before, and a driver's next snapshot of a trial it folded from
the start fills it in.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Add the column (NULL: not known)."""
    op.add_column("snapshots", sa.Column("nodes", sa.Text(), nullable=True))


def downgrade() -> None:
    """Drop it."""
    with op.batch_alter_table("snapshots") as batch:
        batch.drop_column("nodes")
