"""Every experiment's log has an identity: a random id written when it is created.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02

``experiments.log_id``: 32 hex characters, random, written with the experiment's row. With
the experiment's storage path it tells two copies of the same log (a local file and its copy
on S3) from another log that happens to have the same experiment name. Rows created before
this revision keep NULL (their identity is not known) until the next driver session of the
experiment writes one: every copy of an older log upgrades to the same NULL, so no copy is
taken for another log by the upgrade itself.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Add ``experiments.log_id`` (nullable: older experiments get theirs at the next session)."""
    op.add_column("experiments", sa.Column("log_id", sa.String(length=32), nullable=True))


def downgrade() -> None:
    """Drop ``experiments.log_id``."""
    with op.batch_alter_table("experiments") as batch:
        batch.drop_column("log_id")
