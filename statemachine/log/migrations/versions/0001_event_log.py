"""The event log: experiments, driver sessions, events, snapshots.

Revision ID: 0001
Revises:
Create Date: 2026-11-29

The tables are written out here as they were at this revision, never imported from
``statemachine.log.schema``: a later change to the live model must come with a new script.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None

_POSITION = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    """Create the four tables of the event log."""
    op.create_table(
        "experiments",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("storage_path", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_experiments"),
        sa.UniqueConstraint("name", name="uq_experiments_name"),
    )
    op.create_table(
        "driver_sessions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("versions", sa.Text(), nullable=False),
        sa.Column("policy", sa.Text(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("clean_end", sa.Boolean(), nullable=True),
        sa.ForeignKeyConstraint(
            ["experiment_id"],
            ["experiments.id"],
            name="fk_driver_sessions_experiment_id_experiments",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_driver_sessions"),
        sa.UniqueConstraint(
            "experiment_id", "epoch", name="uq_driver_sessions_experiment_id_epoch"
        ),
    )
    op.create_table(
        "events",
        sa.Column("position", _POSITION, autoincrement=True, nullable=False),
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("trial_id", sa.String(length=255), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("type_name", sa.String(length=64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("error_type", sa.String(length=64), nullable=True),
        sa.Column("status_before", sa.String(length=16), nullable=True),
        sa.Column("status_after", sa.String(length=16), nullable=True),
        sa.Column("decision", sa.String(length=32), nullable=True),
        sa.Column("counters", sa.Text(), nullable=True),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("event_id", sa.String(length=64), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["experiment_id"], ["experiments.id"], name="fk_events_experiment_id_experiments"
        ),
        sa.PrimaryKeyConstraint("position", name="pk_events"),
        sa.UniqueConstraint(
            "experiment_id", "trial_id", "seq", name="uq_events_experiment_id_trial_id_seq"
        ),
        sa.UniqueConstraint("experiment_id", "event_id", name="uq_events_experiment_id_event_id"),
    )
    op.create_index("ix_events_experiment_id_position", "events", ["experiment_id", "position"])
    op.create_table(
        "snapshots",
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("trial_id", sa.String(length=255), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("machine_version", sa.String(length=32), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("taken_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["experiment_id"], ["experiments.id"], name="fk_snapshots_experiment_id_experiments"
        ),
        sa.PrimaryKeyConstraint("experiment_id", "trial_id", name="pk_snapshots"),
    )


def downgrade() -> None:
    """Drop the event log (all of its data)."""
    op.drop_table("snapshots")
    op.drop_index("ix_events_experiment_id_position", table_name="events")
    op.drop_table("events")
    op.drop_table("driver_sessions")
    op.drop_table("experiments")
