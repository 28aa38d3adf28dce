"""The read model's ``nodes``: the experiment's per-node tally as the sum of its trials'
shares, each kept with the trial's snapshot (``snapshots.nodes``, revision 0006).

A trial whose snapshot is fresh (this machine's revision, at the trial's last event, with a
share) answers with its share alone: one small JSON value per trial, beside the index
probes that find each trial's last seq (:mod:`statemachine.log.heads`). A trial whose
snapshot is behind continues its share with its attempts after the snapshot (the way
:func:`~statemachine.log.replay.rehydrate` folds the events after one); a trial without a
usable share (no snapshot, an older revision, a row written before 0006, a share that does
not decode) is counted from its attempts, from its start. Both through the one rule,
:meth:`~statemachine.domain.node_tally.TrialNodes.count`, so the sum equals
:func:`~statemachine.domain.node_tally.tally_nodes` of every event.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, select, text

from statemachine.domain.events import Event, decode_event
from statemachine.domain.node_tally import NodeSum, NodeTally, TrialNodes, checked_share
from statemachine.domain.status import Status
from statemachine.exceptions import EventDecodeError
from statemachine.log.bulk import collector_paused
from statemachine.log.engine import chunks
from statemachine.log.heads import trial_heads
from statemachine.log.read.sql import whole_trials
from statemachine.log.records import parse_json
from statemachine.log.replay import fold_stored, share_of
from statemachine.log.schema import ATTEMPTS_WHERE, events, snapshots
from statemachine.log.snapshot import decode_share, machine_version

if TYPE_CHECKING:
    from statemachine.log.connections import Connections
    from statemachine.log.records import StoredEvent

#: Hears about a row a fold stopped at, with why (the read model's ``on_halt``).
Halted = Callable[["StoredEvent", str], None]
#: Rows of attempts read at a time.
_PAGE = 20_000


def node_tallies(db: Connections, experiment: str, on_halt: Halted) -> list[NodeTally]:
    """Per node, what the experiment's attempts and failures did there; worst first."""
    total = NodeSum()
    with collector_paused():
        shares, after, upto = _shares(db, experiment, total)
        refold: set[str] = set()
        for trial_id, seq, event, restoring in _attempts(db, experiment, after, upto, refold,
                                                         total=len(upto)):
            share = shares.get(trial_id)
            if share is None:
                share = shares[trial_id] = TrialNodes()
            share.count(seq, event, restoring)
        for trial_id in refold:  # rare: an attempt that does not decode, or not as recorded
            shares.pop(trial_id, None)
        for trial_id, rows in whole_trials(db, experiment, refold):
            replay = fold_stored(trial_id, rows)
            if replay.halted_at is not None:
                on_halt(replay.halted_at, replay.halt_reason or "")
            shares[trial_id] = share_of(replay.steps)
        for trial_id, share in shares.items():
            total.add(trial_id, share)
    return total.result()


def _shares(
    db: Connections, experiment: str, total: NodeSum
) -> tuple[dict[str, TrialNodes], dict[str, int], dict[str, int]]:
    """Add each trial's fresh share to ``total`` as it is read; return the shares to
    continue, the trials to continue (from the seq their share is at, 0: from the start,
    without a share) and every trial's last seq."""
    tag = machine_version()
    shares: dict[str, TrialNodes] = {}
    after: dict[str, int] = {}
    upto: dict[str, int] = {}
    same: dict[str, list[Any] | None] = {}  # equal texts (a few hundred kept) parse once
    with db.transaction("reading the nodes' shares") as conn:
        experiment_id = db.experiment_id(conn, experiment)
        last = trial_heads(experiment_id)
        snap = snapshots
        joined = last.outerjoin(snap, and_(snap.c.experiment_id == experiment_id,
                                           snap.c.trial_id == last.c.trial_id,
                                           snap.c.machine_version == tag))
        result = conn.execution_options(yield_per=_BATCH).execute(
            select(last.c.trial_id, last.c.last_seq, snap.c.seq, snap.c.nodes)
            .select_from(joined)
        )
        for trial_id, last_seq, seq, stored in result:
            upto[trial_id] = last_seq
            if stored is None or seq is None or seq > last_seq:
                after[trial_id] = 0
            elif seq < last_seq:
                share = decode_share(stored)
                if share is None:
                    after[trial_id] = 0
                else:
                    shares[trial_id] = share
                    after[trial_id] = seq
            else:
                rows = same.get(stored, _UNSEEN)
                if rows is _UNSEEN:
                    rows = _rows(stored)
                    if len(same) < _SAME:
                        same[stored] = rows
                if rows is None:
                    after[trial_id] = 0
                else:
                    total.add_rows(trial_id, rows)
    return shares, after, upto


def _rows(stored: str) -> list[Any] | None:
    try:
        return checked_share(parse_json(stored))
    except (TypeError, ValueError):
        return None


def _attempts(
    db: Connections, experiment: str, after: dict[str, int], upto: dict[str, int],
    refold: set[str], *, total: int,
) -> Iterator[tuple[str, int, Event, bool]]:
    """The attempts of the trials of ``after`` past the seq given there (up to their last
    seq as read with the shares), each trial's in seq order, decoded as they are read; a
    trial whose attempt does not decode (or lacks its recorded status) goes to ``refold``.

    Many such trials (an old log): one pass over the experiment's attempts by their own
    index; a few: each one's rows by the ``(experiment, trial, seq)`` index."""
    if not after:
        return
    rows = _scan(db, experiment) if len(after) * 4 > total else _probe(db, experiment, after)
    for trial_id, seq, type_name, version, payload, status_after in rows:
        if trial_id in refold or seq <= after.get(trial_id, seq) or seq > upto[trial_id]:
            continue
        try:
            data = json.loads(payload)
            if type(data) is not dict or status_after is None:
                raise EventDecodeError("not as recorded")
            event = decode_event(type_name, version, data)
        except (EventDecodeError, TypeError, ValueError):
            refold.add(trial_id)
            continue
        yield trial_id, seq, event, status_after == Status.RESTORING.value


_COLUMNS = (events.c.trial_id, events.c.seq, events.c.type_name, events.c.version,
            events.c.payload, events.c.status_after)


def _scan(db: Connections, experiment: str) -> Iterator[Any]:
    """Every attempt of the experiment in log order, from their partial index, read in
    pages (memory stays bounded)."""
    with db.transaction("reading the nodes' attempts") as conn:
        experiment_id = db.experiment_id(conn, experiment)
    query = (
        select(events.c.position, *_COLUMNS)
        # The partial index's own predicate, as literal text: SQLite uses a partial index
        # only for a WHERE that names its terms (not bound parameters).
        .where(events.c.experiment_id == experiment_id, text(ATTEMPTS_WHERE))
        .order_by(events.c.position)
        .limit(_PAGE)
    )
    for row in db.pages(query, events.c.position, "reading the nodes' attempts", _PAGE):
        yield row[1:]


def _probe(db: Connections, experiment: str, after: dict[str, int]) -> Iterator[Any]:
    """The attempts of the trials of ``after``, trial by trial in seq order, 500 trials a
    statement."""
    with db.transaction("reading the nodes' attempts") as conn:
        experiment_id = db.experiment_id(conn, experiment)
        for chunk in chunks(sorted(after), 500):
            yield from conn.execute(
                select(*_COLUMNS)
                .where(events.c.experiment_id == experiment_id, events.c.trial_id.in_(chunk),
                       events.c.seq > min(after[t] for t in chunk), text(ATTEMPTS_WHERE))
                .order_by(events.c.trial_id, events.c.seq)
            ).all()


_UNSEEN: list[Any] = []  # a sentinel
#: Rows of shares fetched at a time; distinct share texts parsed once.
_BATCH, _SAME = 2_000, 512
