"""Driver sessions say how the driver began: a fresh ``Tuner.fit()`` or a ``Tuner.restore``.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01

``driver_sessions.kind``: ``"fresh"``, ``"restore"``, or NULL where it is not known (a
session recorded before this revision, or by a driver that did not say).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Add ``driver_sessions.kind`` (nullable: older sessions stay unknown)."""
    op.add_column("driver_sessions", sa.Column("kind", sa.String(length=16), nullable=True))


def downgrade() -> None:
    """Drop ``driver_sessions.kind``."""
    with op.batch_alter_table("driver_sessions") as batch:
        batch.drop_column("kind")
