"""Snapshot rows: save (a fenced upsert), load the usable ones, read the events after them.

What a snapshot holds and when it is trusted is :mod:`statemachine.log.snapshot`; this is the
SQL. A snapshot is only a cache of the log: one that does not decode is treated as absent
(its trial is folded from its events, with one warning), never as an error.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any

from sqlalchemy import Integer, bindparam, func, select

from statemachine.domain.state import TrialState
from statemachine.exceptions import EventDecodeError, FencedError, StoreError
from statemachine.log.bulk import collector_paused
from statemachine.log.connections import Connections
from statemachine.log.engine import Prepared, chunks
from statemachine.log.mapper import EVENT_COLUMNS, stored_event
from statemachine.log.records import DriverSession, StoredEvent, utcnow
from statemachine.log.schema import events, snapshots
from statemachine.log.snapshot import (
    Share,
    SnapshotLoad,
    decode_state,
    encode_state,
    machine_version,
    share_text,
    summary_values,
)
from statemachine.log.write_checks import WriteChecks

logger = logging.getLogger("statemachine.log")

#: Snapshot rows fetched and decoded at a time by :meth:`SnapshotTable.load`.
_LOAD_BATCH = 2_000
_SNAPSHOT_VALUES = ("seq", "state", "machine_version", "epoch", "taken_at", "status", "failures",
                    "total_restore_failures", "preemptions", "error_type", "nodes")


class SnapshotTable:
    """The snapshot side of one store."""

    def __init__(self, db: Connections) -> None:
        self._db = db
        self._checks = WriteChecks(db)
        self._load = Prepared(
            select(snapshots.c.trial_id, snapshots.c.state, snapshots.c.nodes).where(
                snapshots.c.experiment_id == bindparam("experiment_id", type_=Integer()),
                snapshots.c.machine_version
                == bindparam("machine_version", type_=snapshots.c.machine_version.type),
            ),
            db.engine.dialect,
        )
        upsert = db.backend.insert(snapshots).values(
            {c.name: bindparam(c.name, type_=c.type) for c in snapshots.c}
        )
        self._upsert = Prepared(
            upsert.on_conflict_do_update(
                index_elements=[snapshots.c.experiment_id, snapshots.c.trial_id],
                set_={name: upsert.excluded[name] for name in _SNAPSHOT_VALUES},
                where=snapshots.c.seq <= upsert.excluded.seq,
            ),
            db.engine.dialect,
        )

    def save(self, session: DriverSession, states: Iterable[TrialState],
             shares: Mapping[str, Share] | None = None) -> int:
        """See :meth:`EventStore.save_snapshots`."""
        states = [s for s in states if s.seq > 0]
        if not states:
            return 0
        db = self._db
        now = utcnow()
        tag = machine_version()
        rows = [
            {
                "experiment_id": session.experiment_id,
                "trial_id": s.trial_id,
                "seq": s.seq,
                "state": encode_state(s),
                "machine_version": tag,
                "epoch": session.epoch,
                "taken_at": now,
                **summary_values(s),
                "nodes": share_text(shares, s.trial_id),
            }
            for s in states
        ]
        checks, upsert = self._checks, self._upsert
        with db.transaction("saving snapshots", raw=True) as cursor:
            epoch = checks.epoch(cursor, session.experiment_id)
            if epoch is None:
                raise StoreError(f"experiment {session.experiment!r} is not in the log")
            if epoch != session.epoch:
                raise FencedError(session.experiment, session.epoch, epoch)
            last = checks.last_seqs(cursor, session.experiment_id, {s.trial_id for s in states})
            for s in states:
                if s.seq > last.get(s.trial_id, 0):
                    raise StoreError(
                        f"snapshot of trial {s.trial_id!r} at seq {s.seq} is ahead of its "
                        f"stored events (last seq {last.get(s.trial_id, 0)}); not saved"
                    )
            cursor.executemany(upsert.sql, upsert.many_params(rows))
        return len(rows)

    def load(self, experiment: str) -> SnapshotLoad:
        """See :meth:`EventStore.load_snapshot_set`."""
        db = self._db
        states: dict[str, TrialState] = {}
        shares: dict[str, Share] = {}
        unusable: dict[str, str] = {}
        with db.transaction("loading snapshots") as conn, collector_paused():
            experiment_id = db.experiment_id(conn, experiment)
            # Straight from the driver's cursor (one row per trial: SQLAlchemy's result
            # rows cost a third of an open of 100k trials), decoded a batch at a time: the
            # stored texts (a kilobyte a trial) are never all held beside the states.
            # (PostgreSQL: a server-side cursor, or the driver would hold every row at once.)
            dbapi = conn.connection.dbapi_connection
            server_side = db.backend.name == "postgresql"
            cursor = dbapi.cursor(  # type: ignore[union-attr]
                *(("statemachine_snapshots",) if server_side else ()))
            try:
                self._load.run(
                    cursor, {"experiment_id": experiment_id, "machine_version": machine_version()}
                )
                while rows := cursor.fetchmany(_LOAD_BATCH):
                    for trial_id, text, share in rows:
                        try:
                            states[trial_id] = decode_state(text, trial_id)
                        except EventDecodeError as exc:
                            unusable[trial_id] = str(exc)
                        else:
                            shares[trial_id] = share
            finally:
                cursor.close()
        if unusable:
            first = next(iter(unusable.values()))
            logger.warning(
                "statemachine: %d snapshot(s) of experiment %r do not decode and are ignored "
                "(their trials are folded from their events; the next snapshot replaces "
                "them): %s%s",
                len(unusable), experiment, first,
                f" (and {len(unusable) - 1} more)" if len(unusable) > 1 else "",
            )  # fmt: skip
        return SnapshotLoad(states, frozenset(unusable), shares)

    def read_tails(
        self, experiment: str, *, refold: Collection[str] = ()
    ) -> Iterator[StoredEvent]:
        """See :meth:`EventStore.read_tails`."""
        db = self._db
        tag = machine_version()
        with db.transaction("reading events after snapshots") as conn:
            experiment_id = db.experiment_id(conn, experiment)
            # Each trial's last seq, read from the (experiment, trial, seq) index alone (an
            # aggregate: the database computes it before joining anything to it) ...
            last = (
                select(events.c.trial_id, func.max(events.c.seq).label("last_seq"))
                .where(events.c.experiment_id == experiment_id)
                .group_by(events.c.trial_id)
                .subquery("last")
            )
            # ... against its usable snapshot: only trials with events past it have a tail.
            after = func.coalesce(snapshots.c.seq, 0)
            behind = (
                select(last.c.trial_id, after.label("after_seq"))
                .select_from(
                    last.outerjoin(
                        snapshots,
                        (snapshots.c.experiment_id == experiment_id)
                        & (snapshots.c.trial_id == last.c.trial_id)
                        & (snapshots.c.machine_version == tag),
                    )
                )
                .where(last.c.last_seq > after)
                .subquery("behind")
            )
            rows: Sequence[Any] = conn.execute(
                select(*EVENT_COLUMNS)
                .select_from(
                    behind.join(
                        events,
                        (events.c.experiment_id == experiment_id)
                        & (events.c.trial_id == behind.c.trial_id)
                        & (events.c.seq > behind.c.after_seq),
                    )
                )
                .order_by(events.c.trial_id, events.c.seq)
            ).all()
            if refold:
                # Rare (a snapshot that does not decode): those trials whole, from seq 1.
                whole = [
                    row
                    for ids in chunks(sorted(refold))
                    for row in conn.execute(
                        select(*EVENT_COLUMNS)
                        .where(events.c.experiment_id == experiment_id, events.c.trial_id.in_(ids))
                        .order_by(events.c.trial_id, events.c.seq)
                    )
                ]
                rows = sorted(
                    [row for row in rows if row[1] not in refold] + whole,
                    key=lambda row: (row[1], row[2]),
                )
        return (stored_event(row, experiment) for row in rows)
