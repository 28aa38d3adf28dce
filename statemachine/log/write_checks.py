"""The reads a write transaction checks first (the experiment's epoch, trials' last seqs),
compiled once and run on the writer's raw cursor: shared by appends and snapshots."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Integer, bindparam, func, select

from statemachine.log.connections import Connections
from statemachine.log.engine import Prepared, chunks
from statemachine.log.schema import events, experiments

_CHUNK = 256  # trials per statement of last seqs (a column each)


class WriteChecks:
    """The reads a write transaction checks first, compiled once, run on the raw cursor."""

    def __init__(self, db: Connections) -> None:
        self._dialect = db.engine.dialect
        self._epoch = Prepared(
            db.lock_for_share(
                select(experiments.c.epoch).where(
                    experiments.c.id == bindparam("experiment_id", type_=Integer())
                )
            ),
            self._dialect,
        )
        self._last_seqs: dict[int, Prepared] = {}
        query = db.backend.last_seqs_query(events)
        self._last_seqs_grouped = None if query is None else Prepared(query, self._dialect)

    def epoch(self, cursor: Any, experiment_id: int) -> int | None:
        """The experiment's current epoch (held against a new session on PostgreSQL)."""
        self._epoch.run(cursor, {"experiment_id": experiment_id})
        found = cursor.fetchone()
        return None if found is None else int(found[0])

    def last_seqs(self, cursor: Any, experiment_id: int, trials: set[str]) -> dict[str, int]:
        """Each trial's last seq (trials without events are absent).

        Each trial's ``max(seq)`` is one backward seek of the unique index (a ``GROUP BY``
        over the trials would read every row of them): PostgreSQL takes the trials as one
        array (the backend's query); SQLite gets one row of scalar subqueries per chunk,
        padded to a power of two (repeating a trial), so few statements are compiled.
        """
        found: dict[str, int] = {}
        grouped = self._last_seqs_grouped
        if grouped is not None:
            for chunk in chunks(sorted(trials)):
                grouped.run(cursor, {"experiment_id": experiment_id, "trials": chunk})
                found.update(
                    (trial, int(seq)) for trial, seq in cursor.fetchall() if seq is not None
                )
            return found
        for chunk in chunks(sorted(trials), _CHUNK):
            size = 1 << (len(chunk) - 1).bit_length()
            prepared = self._last_seqs.get(size)
            if prepared is None:
                experiment_id_param = bindparam("experiment_id", type_=Integer())
                prepared = self._last_seqs[size] = Prepared(
                    select(
                        *(
                            select(func.max(events.c.seq))
                            .where(
                                events.c.experiment_id == experiment_id_param,
                                events.c.trial_id
                                == bindparam(f"t{i}", type_=events.c.trial_id.type),
                            )
                            .scalar_subquery()
                            for i in range(size)
                        )
                    ),
                    self._dialect,
                )
            values: dict[str, Any] = {"experiment_id": experiment_id}
            for i in range(size):
                values[f"t{i}"] = chunk[min(i, len(chunk) - 1)]
            prepared.run(cursor, values)
            row = cursor.fetchone()
            for trial, seq in zip(chunk, row, strict=False):
                if seq is not None:
                    found[trial] = int(seq)
        return found
