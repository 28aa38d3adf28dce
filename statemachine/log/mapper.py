"""Row mapping: the event log's records to table rows and back (no connection in here).

The store's recorders (appends, queries, snapshots) run SQL; this module only says which
columns they read, in what order, and how a row becomes a record (as eventsourcing keeps its
mapper apart from its recorders).
"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any

from statemachine.domain.events import TrialFailed
from statemachine.domain.machine import TransitionRecord
from statemachine.domain.policy import RetryPolicy
from statemachine.log.payloads import payload_json
from statemachine.log.records import (
    UNREADABLE_TIME,
    AppendRequest,
    DriverSession,
    ExperimentInfo,
    SessionInfo,
    StoredEvent,
    Unreadable,
    check_storable,
    dump_json,
    load_json,
    utc,
)
from statemachine.log.schema import events

#: Columns of ``events`` in the order :func:`stored_event` reads them.
EVENT_COLUMNS = (
    events.c.position,
    events.c.trial_id,
    events.c.seq,
    events.c.type_name,
    events.c.version,
    events.c.payload,
    events.c.error_type,
    events.c.status_before,
    events.c.status_after,
    events.c.decision,
    events.c.counters,
    events.c.epoch,
    events.c.event_id,
    events.c.recorded_at,
)
#: The columns an append writes (every column but the position, which the database
#: assigns), in the order of :func:`event_values` and then ``recorded_at``, which is stamped
#: under the write lock.
INSERTED = ["experiment_id"] + [
    c.name for c in EVENT_COLUMNS if c.name not in ("position", "recorded_at")
] + ["recorded_at"]

#: Columns of ``events`` a bulk fold reads (:meth:`EventStore.read_fold_rows`).
FOLD_COLUMNS = (*EVENT_COLUMNS[:6], events.c.counters)


def stored_event(row: Any, experiment: str) -> StoredEvent:
    """The record of a row selected as :data:`EVENT_COLUMNS` (an unreadable ``recorded_at``
    is named in the record's ``damage``, never raised)."""
    recorded_at = row[13]
    damage = None
    if isinstance(recorded_at, Unreadable):
        damage = f"recorded_at {str(recorded_at.raw)[:80]!r} is not a time"
        recorded_at = UNREADABLE_TIME
    return StoredEvent(
        row[0], experiment, row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8],
        row[9], row[10], row[11], row[12], utc(recorded_at), damage,
    )  # fmt: skip


@functools.lru_cache(maxsize=4096)
def _storable_trial_id(trial_id: str) -> str:
    return check_storable(trial_id, "trial id")


def event_values(session: DriverSession, request: AppendRequest, event_id: str) -> EventValues:
    """The values of the ``events`` row that appends ``request``: :data:`INSERTED` but the
    last, ``recorded_at`` (the append stamps it under its write lock)."""
    event = request.event
    record = request.record
    trial_id = request.trial_id
    if record is None:
        error = event.error.kind if isinstance(event, TrialFailed) else None
        before = after = decision = counters = None
    else:
        # A failure's record (rare, and it holds the traceback) is not kept in the cache.
        columns = _record_columns if record.error is None else _record_columns.__wrapped__
        error, before, after, decision, counters = columns(record)
        if error is None and isinstance(event, TrialFailed):
            error = event.error.kind
    if not (type(event_id) is str and 0 < len(event_id) <= 64 and event_id.isascii()
            and "\x00" not in event_id):  # an id as the log makes them passes as it is
        event_id = check_storable(event_id, "event id", max_length=64)  # fmt: skip
    return (
        session.experiment_id,
        _storable_trial_id(trial_id) if type(trial_id) is str else check_storable(
            trial_id, "trial id"
        ),
        request.expected_seq + 1,
        event.type_name,
        event.version,
        payload_json(event),
        error,
        before,
        after,
        decision,
        counters,
        session.epoch,
        event_id,
    )


@functools.lru_cache(maxsize=4096)
def _record_columns(
    record: TransitionRecord,
) -> tuple[str | None, str, str, str | None, str]:
    """``error_type, status_before, status_after, decision, counters`` of a record (a run of
    checkpoints of a running trial is one record: its columns are made once)."""
    return (
        record.error.kind if record.error is not None else None,
        record.status_before.value,
        record.status_after.value,
        record.decision.value if record.decision is not None else None,
        dump_json(record.counters._asdict()),
    )


#: What :func:`event_values` returns (:data:`INSERTED` without ``recorded_at``).
EventValues = tuple[
    int, str, int, str, int, str, "str | None", "str | None", "str | None", "str | None",
    "str | None", int, str,
]  # fmt: skip


def event_row(values: EventValues, recorded_at: datetime) -> dict[str, Any]:
    """The row of :func:`event_values` by column name (for the rare paths that read it)."""
    return dict(zip(INSERTED, (*values, recorded_at), strict=True))


def inserted_event(
    values: EventValues, recorded_at: datetime, position: int, experiment: str
) -> StoredEvent:
    """The record of an appended row once the database gave it ``position``."""
    return StoredEvent(
        position, experiment, *values[1:], recorded_at,
    )


def session_info(row: Any, experiment: str) -> SessionInfo:
    """The record of a ``driver_sessions`` row."""
    return SessionInfo(
        experiment=experiment,
        epoch=row.epoch,
        host=row.host,
        pid=row.pid,
        versions=load_json(row.versions, f"versions of session {row.epoch}"),
        policy=RetryPolicy.from_dict(load_json(row.policy, f"policy of session {row.epoch}")),
        started_at=utc(row.started_at),
        ended_at=utc(row.ended_at) if row.ended_at else None,
        clean_end=row.clean_end,
        kind=getattr(row, "kind", None),
    )


def experiment_info(row: Any) -> ExperimentInfo:
    """The record of an ``experiments`` row joined with its counts (``trials``, ``events``,
    ``last``)."""
    return ExperimentInfo(
        name=row.name,
        storage_path=row.storage_path,
        created_at=utc(row.created_at),
        epoch=row.epoch,
        trials=row.trials or 0,
        events=row.events or 0,
        last_recorded_at=utc(row.last) if isinstance(row.last, datetime) else None,
    )
