"""Appending events: the fenced, sequence-checked insert, group commit, and why one failed.

Every append runs here (the store's hot path, kept in one module): one event is one
``INSERT ... SELECT`` that checks the session's epoch and the trial's last sequence number
and inserts in a single statement; a batch checks once and inserts with ``executemany``.
When nothing was inserted, :meth:`Appends.diagnose` says why: an idempotent retry (the stored
rows are returned), a fenced session, or a sequence conflict.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Literal, overload

from sqlalchemy import Connection, Insert, Integer, bindparam, func, insert, literal_column, select
from sqlalchemy.exc import IntegrityError

from statemachine.exceptions import (
    ConcurrencyError,
    ConfigurationError,
    FencedError,
    StoreError,
)
from statemachine.log.connections import Connections
from statemachine.log.engine import Prepared, chunks
from statemachine.log.mapper import (
    EVENT_COLUMNS,
    INSERTED,
    event_row,
    event_values,
    inserted_event,
    stored_event,
)
from statemachine.log.queries import last_seqs
from statemachine.log.records import (
    AppendRequest,
    DriverSession,
    StoredEvent,
    new_event_id,
    new_event_ids,
    utc,
    utcnow,
)
from statemachine.log.schema import events, experiments
from statemachine.log.write_checks import WriteChecks


class Appends:
    """The append statements of one store, compiled once for its database."""

    def __init__(self, db: Connections) -> None:
        self._db = db
        dialect = db.engine.dialect
        values = {name: bindparam(name, type_=events.c[name].type) for name in INSERTED}
        self._append_one = Prepared(
            self._append_statement(), dialect, fields=[*INSERTED, "expected_seq"]
        )
        self._insert_many = Prepared(
            db.backend.appended(insert(events).values(values)), dialect, fields=INSERTED
        )
        self._plain_insert = Prepared(insert(events).values(values), dialect, fields=INSERTED)
        self._insert_rows = db.backend.row_inserter(
            events, INSERTED, self._plain_insert.sql, dialect
        )
        assert self._insert_many.in_order and self._plain_insert.in_order  # rows go as built
        #: The one processed value of an inserted row (SQLite writes datetimes as text).
        self._stamp: Callable[[datetime], Any] = (
            self._plain_insert.processor("recorded_at") or _unprocessed
        )
        self.checks = WriteChecks(db)

    def _append_statement(self) -> Insert:
        """``INSERT INTO events SELECT <values> FROM experiments WHERE <fence and seq hold>``.

        One statement checks the epoch, the trial's last sequence number and inserts; it
        returns no row when a check fails (then :meth:`diagnose` says which).
        """
        params = {name: bindparam(name, type_=events.c[name].type) for name in INSERTED}
        expected = bindparam("expected_seq", type_=Integer())
        # coalesce outside the subquery: a bare max() is answered from the unique index
        # (SQLite's min/max optimisation) instead of scanning the trial's rows.
        last_seq = func.coalesce(
            select(func.max(events.c.seq))
            .where(
                events.c.experiment_id == params["experiment_id"],
                events.c.trial_id == params["trial_id"],
            )
            .scalar_subquery(),
            literal_column("0"),
        )
        source = self._db.lock_for_share(
            select(*(params[name] for name in INSERTED)).where(
                experiments.c.id == params["experiment_id"],
                experiments.c.epoch == params["epoch"],
                last_seq == expected,
            )
        )
        statement = insert(events).from_select([events.c[name] for name in INSERTED], source)
        return self._db.backend.appended(statement)

    @overload
    def append(
        self, session: DriverSession, request: AppendRequest, *, returning: Literal[True] = ...
    ) -> StoredEvent: ...

    @overload
    def append(
        self, session: DriverSession, request: AppendRequest, *, returning: bool
    ) -> StoredEvent | None: ...

    def append(
        self, session: DriverSession, request: AppendRequest, *, returning: bool = True
    ) -> StoredEvent | None:
        """Append one event durably (see :meth:`EventStore.append`): one statement.

        ``returning=False``: the same, without building the stored record (``None``) when
        the event is new.
        """
        db = self._db
        values = event_values(session, request, request.event_id or new_event_id())
        what = "appending an event"
        with db.lock:  # held across the append and its diagnosis
            try:
                with db.transaction(what, raw=True, one_statement=True) as cursor:
                    # Stamped under the write lock: times follow commit order, and an event
                    # of a fenced epoch is always stamped before the newer session began.
                    now = utcnow()
                    self._append_one.run(cursor, (*values, now, request.expected_seq))
                    position = db.backend.inserted_position(cursor)
                if position is not None:
                    return inserted_event(values, now, position, session.experiment) if (
                        returning
                    ) else None
            except StoreError as exc:
                if not isinstance(exc.__cause__, IntegrityError):
                    raise  # else a concurrent writer won the race for this seq or event id
            # Nothing inserted: an idempotent retry, a fenced session or a seq conflict.
            with db.transaction(what, write=True) as conn:
                return self.diagnose(conn, session, [event_row(values, utcnow())])[0]

    def append_batch(
        self, session: DriverSession, requests: Sequence[AppendRequest], *, returning: bool = True,
        recorded_at: Sequence[datetime] | None = None,
    ) -> list[StoredEvent]:
        """Append many events in one transaction (see :meth:`EventStore.append_batch`).

        One request is :meth:`append`'s one statement. ``recorded_at``: each event's own time
        (events reconstructed from another source); ``None``: the commit's time, stamped
        under the write lock.
        """
        if not requests:
            return []
        if recorded_at is not None and len(recorded_at) != len(requests):
            raise ConfigurationError(
                f"{len(requests)} events but {len(recorded_at)} times: give one time per event")
        if len(requests) == 1 and recorded_at is None:
            stored = self.append(session, requests[0], returning=returning)
            return [stored] if stored is not None else []
        db = self._db
        missing = sum(1 for r in requests if r.event_id is None)
        new_ids = iter(new_event_ids(missing) if missing else ())  # one read of the source
        rows = []
        first: dict[str, int] = {}  # each trial's first expected seq in the batch
        following: dict[str, int] = {}
        chained = True  # each trial's requests follow each other (4, then 5, ...)
        for r in requests:
            rows.append(event_values(session, r, r.event_id or next(new_ids)))
            trial, expected = r.trial_id, r.expected_seq
            if following.get(trial, expected) != expected:
                chained = False
            elif trial not in following:
                first[trial] = expected
            following[trial] = expected + 1
        what = "appending a batch of events"
        with db.lock:  # held across the append and its diagnosis
            try:
                with db.transaction(what, raw=True) as cursor:
                    epoch = self.checks.epoch(cursor, session.experiment_id)
                    last = self.checks.last_seqs(cursor, session.experiment_id, set(first))
                    positions: list[int] | None = None
                    if (
                        epoch == session.epoch
                        and chained
                        and all(last.get(t, 0) == seq for t, seq in first.items())
                    ):
                        now = utcnow()  # under the lock, as in append()
                        stamp = (self._stamp(now),)
                        if recorded_at is None:
                            params = [row + stamp for row in rows]
                        else:
                            stamps = [utc(t) for t in recorded_at]
                            params = [(*row, self._stamp(t))
                                      for row, t in zip(rows, stamps, strict=True)]
                        if returning:
                            positions = db.backend.insert_many(
                                cursor, self._insert_many.sql, params
                            )
                        else:
                            self._insert_rows(cursor, params)
                            positions = []
                if positions is not None:
                    experiment = session.experiment
                    times = stamps if recorded_at is not None else [now] * len(rows)
                    return [
                        inserted_event(row, when, position, experiment)
                        for row, when, position in zip(rows, times, positions, strict=returning)
                    ]
            except StoreError as exc:
                if not isinstance(exc.__cause__, IntegrityError):
                    raise
            with db.transaction(what, write=True) as conn:
                return self.diagnose(conn, session, [event_row(row, utcnow()) for row in rows])

    def diagnose(
        self, conn: Connection, session: DriverSession, rows: list[dict[str, Any]]
    ) -> list[StoredEvent]:
        """Why an append stored nothing: an idempotent retry (return it), fenced, or a conflict."""
        found = {
            r.event_id: r
            for ids in chunks([row["event_id"] for row in rows])
            for r in conn.execute(
                select(*EVENT_COLUMNS).where(
                    events.c.experiment_id == session.experiment_id, events.c.event_id.in_(ids)
                )
            )
        }
        same = [
            found.get(row["event_id"]) is not None
            and tuple(found[row["event_id"]][1:6])
            == (row["trial_id"], row["seq"], row["type_name"], row["version"], row["payload"])
            for row in rows
        ]
        if all(same):
            return [stored_event(found[row["event_id"]], session.experiment) for row in rows]
        epoch = conn.execute(
            select(experiments.c.epoch).where(experiments.c.id == session.experiment_id)
        ).scalar_one()
        if epoch != session.epoch:
            raise FencedError(session.experiment, session.epoch, epoch)
        for row, ok in zip(rows, same, strict=True):
            other = found.get(row["event_id"])
            if other is not None and not ok:
                raise ConcurrencyError(
                    f"event id {row['event_id']!r} is already stored for a different event "
                    f"(trial {other.trial_id!r}, seq {other.seq}, {other.type_name}); "
                    "use a new event id",
                    row["trial_id"],
                    row["seq"] - 1,
                    other.seq,
                )
        last = last_seqs(conn, session.experiment_id, [row["trial_id"] for row in rows])
        running: dict[str, int] = {}
        for row in rows:
            trial = row["trial_id"]
            actual = running.get(trial, last.get(trial, 0))
            if row["seq"] - 1 != actual:
                raise ConcurrencyError(
                    f"trial {trial!r}: the append expected seq {row['seq'] - 1} to be the "
                    f"trial's last, but the log's last is {actual}; read the trial again "
                    "and fold from there",
                    trial,
                    row["seq"] - 1,
                    actual,
                )
            running[trial] = row["seq"]
        raise ConcurrencyError(
            "a concurrent append took the same sequence number; read the trial again",
            rows[0]["trial_id"],
            rows[0]["seq"] - 1,
            rows[0]["seq"],
        )


def _unprocessed(value: datetime) -> datetime:
    return value
