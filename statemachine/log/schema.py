"""The event log's tables, as SQLAlchemy Core metadata (the live model).

This module is what the code reads and writes through, and what ``alembic check`` compares
the migrated database against. It never creates anything: every schema change is an Alembic
script in ``statemachine/log/migrations/versions/`` that freezes its own copy of the tables
it touches.

JSON documents (payloads, counters, policies, snapshot states) are stored as text written by
:func:`statemachine.log.records.dump_json`, so a corrupted row surfaces as an
``EventDecodeError`` on that row instead of breaking a whole read.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

from statemachine.log.records import Unreadable

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)


class TolerantDateTime(TypeDecorator[Any]):
    """A ``DateTime(timezone=True)`` column whose unreadable value (SQLite keeps whatever
    text was written behind the log's back, e.g. ``'garbage'``) reads as
    :class:`~statemachine.log.records.Unreadable` instead of raising while a whole result is
    fetched: the row is reported, the other rows still read. Stored exactly as a DateTime.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def result_processor(self, dialect: Dialect, coltype: object) -> Any:
        """The dialect's parser, turning a value it cannot parse into ``Unreadable``."""
        inner = self.impl_instance.result_processor(dialect, coltype)
        if inner is None:  # the driver gives datetimes (PostgreSQL): nothing to parse
            return None

        def process(value: Any) -> Any:
            if value is None:
                return None
            try:
                return inner(value)
            except (ValueError, TypeError, OverflowError):
                return Unreadable(value)

        return process

#: The events ``ix_events_attempts`` holds: a trial's starts and failures (and the causes of
#: actor deaths learned after them).
ATTEMPTS_WHERE = "type_name IN ('TrialStarted', 'TrialFailed', 'DeathCauseLearned')"

#: The predicate of ``ix_events_firsts``: a trial's first event (the writer appends
#: ``expected_seq + 1`` from 0).
FIRSTS_WHERE = "seq = 1"

#: A 64-bit autoincrementing key; SQLite only autoincrements ``INTEGER PRIMARY KEY`` (rowid).
Position = BigInteger().with_variant(Integer(), "sqlite")

experiments = Table(
    "experiments",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(255), nullable=False),
    Column("storage_path", Text, nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("epoch", Integer, nullable=False),
    # The log's identity: random, written when the experiment is created (NULL: created
    # before revision 0003; the next driver session writes one). With ``storage_path`` it
    # tells two copies of this log from another log of the same name (tune/log_sync.py).
    Column("log_id", String(32), nullable=True),
    UniqueConstraint("name"),
)

driver_sessions = Table(
    "driver_sessions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("experiment_id", Integer, ForeignKey("experiments.id"), nullable=False),
    Column("epoch", Integer, nullable=False),
    Column("host", String(255), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("versions", Text, nullable=False),
    Column("policy", Text, nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("ended_at", DateTime(timezone=True), nullable=True),
    Column("clean_end", Boolean, nullable=True),
    # "fresh" (Tuner.fit) or "restore" (Tuner.restore); NULL: not known (revision 0002)
    Column("kind", String(16), nullable=True),
    UniqueConstraint("experiment_id", "epoch"),
)

events = Table(
    "events",
    metadata,
    Column("position", Position, primary_key=True, autoincrement=True),
    Column("experiment_id", Integer, ForeignKey("experiments.id"), nullable=False),
    Column("trial_id", String(255), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("type_name", String(64), nullable=False),
    Column("version", Integer, nullable=False),
    Column("payload", Text, nullable=False),
    Column("error_type", String(64), nullable=True),
    Column("status_before", String(16), nullable=True),
    Column("status_after", String(16), nullable=True),
    Column("decision", String(32), nullable=True),
    Column("counters", Text, nullable=True),
    Column("epoch", Integer, nullable=False),
    Column("event_id", String(64), nullable=False),
    Column("recorded_at", TolerantDateTime(), nullable=False),
    UniqueConstraint("experiment_id", "trial_id", "seq"),
    UniqueConstraint("experiment_id", "event_id"),
    Index(None, "experiment_id", "position"),
    # The attempts (starts and failures) alone, in log order: what ``nodes`` tallies
    # (revision 0004). Partial, so the other events (most of a log) never touch it.
    Index("ix_events_attempts", "experiment_id", "position",
          sqlite_where=text(ATTEMPTS_WHERE), postgresql_where=text(ATTEMPTS_WHERE)),
    # Each trial's first event alone (revision 0005): the listings find every trial, and
    # where it starts, from as many index entries as there are trials.
    Index("ix_events_firsts", "experiment_id", "trial_id", "position",
          sqlite_where=text(FIRSTS_WHERE), postgresql_where=text(FIRSTS_WHERE)),
)

snapshots = Table(
    "snapshots",
    metadata,
    Column("experiment_id", Integer, ForeignKey("experiments.id"), nullable=False),
    Column("trial_id", String(255), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("state", Text, nullable=False),
    Column("machine_version", String(32), nullable=False),
    Column("epoch", Integer, nullable=False),
    Column("taken_at", DateTime(timezone=True), nullable=False),
    # A summary of ``state`` (revision 0004), what listings filter, count and order by in
    # SQL (statemachine/log/read). Written with the state; NULL: not known (a state that did
    # not decode when 0004 filled them in), and the state is decoded instead.
    Column("status", String(16), nullable=True),
    Column("failures", Integer, nullable=True),
    Column("total_restore_failures", Integer, nullable=True),
    Column("preemptions", Integer, nullable=True),
    Column("error_type", String(64), nullable=True),
    # The trial's share of the per-node tally at ``seq`` (revision 0006), JSON
    # (:class:`~statemachine.domain.node_tally.TrialNodes`): ``trial-replay nodes`` sums
    # these instead of reading every attempt. NULL: not known (a row written before 0006,
    # or by a driver that resumed from one), and the trial's attempts are read instead.
    Column("nodes", Text, nullable=True),
    PrimaryKeyConstraint("experiment_id", "trial_id"),
)

#: Every table of the event log (what a database must hold to be one).
TABLE_NAMES = tuple(metadata.tables)
