"""Reading the event log: a trial, an experiment in pages, the lean bulk-fold rows, listings.

Reads run on pooled connections, each in a transaction of its own (a consistent snapshot that
never blocks the writer); long reads are paged by position, which only grows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Integer, bindparam, func, select

from statemachine.exceptions import UnknownTrialError, close_matches
from statemachine.log.connections import Connections
from statemachine.log.engine import Prepared, chunks
from statemachine.log.heads import trial_heads
from statemachine.log.mapper import (
    EVENT_COLUMNS,
    FOLD_COLUMNS,
    experiment_info,
    session_info,
    stored_event,
)
from statemachine.log.records import ExperimentInfo, FoldRow, SessionInfo, StoredEvent, utc
from statemachine.log.schema import driver_sessions, events, experiments

#: ``(column index, the dialect's result processor)`` of the columns that have one.
_Processors = tuple[tuple[int, Callable[[Any], Any]], ...]

_NOTHING = object()  # equal to no value a column holds

_READ_PAGE = 5_000
_FOLD_PAGE = 20_000
_TRIALS_CHUNK = 500  # trials a statement of read_trials (about 10,000 rows at 20 a trial)


def last_seqs(conn: Connection, experiment_id: int, trials: Iterable[str]) -> dict[str, int]:
    """Each trial's last seq (trials without events are absent)."""
    last: dict[str, int] = {}
    for chunk in chunks(sorted(set(trials))):
        last.update(
            conn.execute(
                select(events.c.trial_id, func.max(events.c.seq))
                .where(events.c.experiment_id == experiment_id, events.c.trial_id.in_(chunk))
                .group_by(events.c.trial_id)
            ).all()
        )
    return last


class Queries:
    """The read side of one store."""

    def __init__(self, db: Connections) -> None:
        self._db = db
        self._prepared: dict[tuple[Any, ...], tuple[Prepared, _Processors]] = {}

    def read_trial(
        self,
        experiment: str,
        trial_id: str,
        *,
        upto_seq: int | None = None,
        upto_time: datetime | None = None,
    ) -> list[StoredEvent]:
        """See :meth:`EventStore.read_trial`."""
        db = self._db
        with db.transaction("reading a trial") as conn:
            experiment_id = db.experiment_id(conn, experiment)
            query = select(*EVENT_COLUMNS).where(
                events.c.experiment_id == experiment_id, events.c.trial_id == trial_id
            )
            if upto_seq is not None:
                query = query.where(events.c.seq <= upto_seq)
            if upto_time is not None:
                query = query.where(events.c.recorded_at <= utc(upto_time))
            rows = conn.execute(query.order_by(events.c.seq)).all()
            if not rows and not _has_trial(conn, experiment_id, trial_id):
                trials = _trial_ids(conn, experiment_id)
                raise UnknownTrialError(experiment, trial_id, close_matches(trial_id, trials))
        return [stored_event(row, experiment) for row in rows]

    def read_experiment(
        self,
        experiment: str,
        *,
        from_position: int = 0,
        limit: int | None = None,
        upto_time: datetime | None = None,
    ) -> Iterator[StoredEvent]:
        """See :meth:`EventStore.read_experiment`."""
        db = self._db
        with db.transaction("reading an experiment") as conn:
            experiment_id = db.experiment_id(conn, experiment)
        remaining = limit
        after = from_position
        while remaining is None or remaining > 0:
            page = _READ_PAGE if remaining is None else min(_READ_PAGE, remaining)
            query = (
                select(*EVENT_COLUMNS)
                .where(events.c.experiment_id == experiment_id, events.c.position > after)
                .order_by(events.c.position)
                .limit(page)
            )
            if upto_time is not None:
                query = query.where(events.c.recorded_at <= utc(upto_time))
            with db.transaction("reading an experiment") as conn:
                rows = conn.execute(query).all()
            for row in rows:
                yield stored_event(row, experiment)
            if len(rows) < page:
                return
            after = rows[-1][0]
            if remaining is not None:
                remaining -= len(rows)

    def read_trials(
        self, experiment: str, trial_ids: Iterable[str] | None = None
    ) -> Iterator[tuple[str, list[StoredEvent]]]:
        """See :meth:`EventStore.read_trials`."""
        db = self._db
        with db.transaction("reading trials") as conn:
            experiment_id = db.experiment_id(conn, experiment)
            ids = sorted(set(trial_ids)) if trial_ids is not None else _trial_ids(
                conn, experiment_id)
        for chunk in chunks(ids, _TRIALS_CHUNK):
            query = (
                select(*EVENT_COLUMNS)
                .where(events.c.experiment_id == experiment_id, events.c.trial_id.in_(chunk))
                .order_by(events.c.trial_id, events.c.seq)
            )
            with db.transaction("reading trials") as conn:
                rows = conn.execute(query).all()
            trial: list[StoredEvent] = []
            for row in rows:
                event = stored_event(row, experiment)
                if trial and trial[0].trial_id != event.trial_id:
                    yield trial[0].trial_id, trial
                    trial = []
                trial.append(event)
            if trial:
                yield trial[0].trial_id, trial

    def read_event_rows(self, experiment: str) -> Iterator[Any]:
        """See :meth:`EventStore.read_event_rows`."""
        return self._paged_rows(EVENT_COLUMNS, experiment)

    def read_fold_rows(
        self,
        experiment: str,
        *,
        upto_position: int | None = None,
        upto_time: datetime | None = None,
    ) -> Iterator[FoldRow]:
        """See :meth:`EventStore.read_fold_rows`."""
        return self._paged_rows(FOLD_COLUMNS, experiment, upto_position, upto_time)

    def _paged_rows(
        self,
        columns: tuple[Any, ...],
        experiment: str,
        upto_position: int | None = None,
        upto_time: datetime | None = None,
    ) -> Iterator[Any]:
        """``columns`` of the experiment's events in position order, read in pages (the
        experiment is looked up when the first row is asked for, as before).

        The statement is compiled once and run on the driver's cursor
        (:meth:`Connections.raw_pages`): the rows are the driver's tuples, a column the
        dialect parses (SQLite's times) parsed here, once for a run of rows sharing a value
        (a batch's one timestamp).
        """
        db = self._db
        with db.transaction("reading an experiment") as conn:
            experiment_id = db.experiment_id(conn, experiment)
        key = (columns, upto_position is not None, upto_time is not None)
        prepared = self._prepared.get(key)
        if prepared is None:
            prepared = self._prepared[key] = _paged_statement(db, *key)
        statement, processors = prepared
        values = {"experiment_id": experiment_id, "upto_position": upto_position,
                  "upto_time": utc(upto_time) if upto_time is not None else None}
        pages = db.raw_pages(statement, values, "reading an experiment", _FOLD_PAGE)
        if not processors:
            for rows in pages:
                yield from rows
            return
        if len(processors) == 1:  # the usual case (SQLite: the time alone)
            ((i, process),) = processors
            raw: Any = _NOTHING
            value: tuple[Any] = (None,)
            for rows in pages:
                for row in rows:
                    if row[i] != raw:
                        raw = row[i]
                        value = (process(raw),)
                    yield row[:i] + value + row[i + 1:]
            return
        memo: dict[int, tuple[Any, Any]] = {}
        for rows in pages:
            for row in rows:
                items = list(row)
                for i, process in processors:
                    raw = items[i]
                    seen = memo.get(i)
                    if seen is None or seen[0] != raw:
                        seen = memo[i] = (raw, process(raw))
                    items[i] = seen[1]
                yield tuple(items)

    def has_trial(self, experiment: str, trial_id: str) -> bool:
        """See :meth:`EventStore.has_trial`."""
        db = self._db
        with db.transaction("reading a trial") as conn:
            return _has_trial(conn, db.experiment_id(conn, experiment), trial_id)

    def list_trials(self, experiment: str) -> list[str]:
        """See :meth:`EventStore.list_trials`."""
        db = self._db
        with db.transaction("listing trials") as conn:
            return _trial_ids(conn, db.experiment_id(conn, experiment))

    def experiment_names(self) -> list[str]:
        """See :meth:`EventStore.experiment_names`."""
        with self._db.transaction("listing experiments") as conn:
            return list(conn.execute(select(experiments.c.name)
                                     .order_by(experiments.c.name)).scalars())

    def list_experiments(self) -> list[ExperimentInfo]:
        """See :meth:`EventStore.list_experiments`."""
        # Each trial's head by index probes (the trials' count, not the events', sets the
        # cost); the last event's time through the (experiment_id, position) index.
        heads = trial_heads(None)
        counts = (
            select(heads.c.experiment_id, func.count().label("trials"),
                   func.sum(heads.c.last_seq).label("events"))
            .group_by(heads.c.experiment_id)
            .subquery()
        )
        newest = events.alias("newest")
        last = (
            select(events.c.recorded_at)
            .where(events.c.position == select(func.max(newest.c.position))
                   .where(newest.c.experiment_id == experiments.c.id)
                   .correlate(experiments).scalar_subquery())
            .correlate(experiments)
            .scalar_subquery()
            .label("last")
        )
        query = (
            select(experiments, counts.c.trials, counts.c.events, last)
            .outerjoin(counts, counts.c.experiment_id == experiments.c.id)
            .order_by(experiments.c.name)
        )
        with self._db.transaction("listing experiments") as conn:
            rows = conn.execute(query).all()
        return [experiment_info(row) for row in rows]

    def list_sessions(self, experiment: str) -> list[SessionInfo]:
        """See :meth:`EventStore.list_sessions`."""
        db = self._db
        with db.transaction("listing driver sessions") as conn:
            experiment_id = db.experiment_id(conn, experiment)
            rows = conn.execute(
                select(driver_sessions)
                .where(driver_sessions.c.experiment_id == experiment_id)
                .order_by(driver_sessions.c.epoch)
            ).all()
        return [session_info(row, experiment) for row in rows]


def _paged_statement(db: Connections, columns: tuple[Any, ...], upto_position: bool,
                     upto_time: bool) -> tuple[Prepared, _Processors]:
    """The page statement of :meth:`Queries._paged_rows` (``after`` a position, in position
    order) and the result processors of its columns that have one (index, processor)."""
    dialect = db.engine.dialect
    query = select(*columns).where(
        events.c.experiment_id == bindparam("experiment_id", type_=Integer()),
        events.c.position > bindparam("after", type_=events.c.position.type),
    )
    if upto_position:
        query = query.where(
            events.c.position <= bindparam("upto_position", type_=events.c.position.type))
    if upto_time:
        query = query.where(
            events.c.recorded_at <= bindparam("upto_time", type_=events.c.recorded_at.type))
    statement = Prepared(query.order_by(events.c.position).limit(_FOLD_PAGE), dialect)
    processors = tuple(
        (i, processor) for i, column in enumerate(columns)
        if (processor := column.type._cached_result_processor(dialect, None)) is not None
    )
    return statement, processors


def _has_trial(conn: Connection, experiment_id: int, trial_id: str) -> bool:
    return (
        conn.execute(
            select(events.c.seq)
            .where(events.c.experiment_id == experiment_id, events.c.trial_id == trial_id)
            .limit(1)
        ).first()
        is not None
    )


def _trial_ids(conn: Connection, experiment_id: int) -> list[str]:
    return list(
        conn.execute(
            select(events.c.trial_id)
            .where(events.c.experiment_id == experiment_id)
            .group_by(events.c.trial_id)
            .order_by(events.c.trial_id)
        ).scalars()
    )
