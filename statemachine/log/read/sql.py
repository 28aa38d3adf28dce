"""The read model's SQL: per-trial index facts, usable snapshot rows, tails, positions.

Each function runs in one read transaction of the store's pooled connections (a consistent
view that never blocks the writer). What to do with the rows (fold, filter, order) is
:mod:`statemachine.log.read.model`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, func, select

from statemachine.domain.state import TrialState
from statemachine.exceptions import EventDecodeError
from statemachine.log.bulk import collector_paused
from statemachine.log.engine import chunks
from statemachine.log.mapper import EVENT_COLUMNS, stored_event
from statemachine.log.read.summary import TrialSummary
from statemachine.log.schema import events, snapshots
from statemachine.log.snapshot import decode_state, machine_version

if TYPE_CHECKING:
    from statemachine.log.connections import Connections
    from statemachine.log.records import StoredEvent
    from statemachine.log.store import EventStore

#: Folds a trial's rows after a state (``None``: from its start) into its current state.
FoldTail = Callable[[str, "TrialState | None", Iterable["StoredEvent"]], TrialState]


def trial_index(
    conn: Connection, experiment_id: int, trial_ids: Collection[str] | None = None
) -> dict[str, tuple[int, int]]:
    """Per trial ``(last seq, position of its first event)``, from the events' indexes."""
    query = (
        select(events.c.trial_id, func.max(events.c.seq), func.min(events.c.position))
        .where(events.c.experiment_id == experiment_id)
        .group_by(events.c.trial_id)
    )
    if trial_ids is None:
        return {t: (last, first) for t, last, first in conn.execute(query)}
    found: dict[str, tuple[int, int]] = {}
    for chunk in chunks(sorted(set(trial_ids))):
        found.update((t, (last, first)) for t, last, first
                     in conn.execute(query.where(events.c.trial_id.in_(chunk))))
    return found


def snapshot_rows(
    conn: Connection, experiment_id: int, trial_ids: Collection[str] | None = None
) -> dict[str, tuple[int, str]]:
    """The usable snapshot rows (this machine's revision): trial -> ``(seq, state text)``."""
    query = select(snapshots.c.trial_id, snapshots.c.seq, snapshots.c.state).where(
        snapshots.c.experiment_id == experiment_id,
        snapshots.c.machine_version == machine_version(),
    )
    if trial_ids is None:
        return {t: (seq, text) for t, seq, text in conn.execute(query)}
    found: dict[str, tuple[int, str]] = {}
    for chunk in chunks(sorted(set(trial_ids))):
        found.update((t, (seq, text)) for t, seq, text
                     in conn.execute(query.where(snapshots.c.trial_id.in_(chunk))))
    return found


def tails(
    conn: Connection, experiment_id: int, experiment: str, after: dict[str, int]
) -> Iterator[tuple[str, list[StoredEvent]]]:
    """Each trial of ``after`` with its events past ``after[trial]``, trial by trial."""
    for chunk in chunks(sorted(after), 500):
        low = min(after[t] for t in chunk)
        rows = conn.execute(
            select(*EVENT_COLUMNS)
            .where(events.c.experiment_id == experiment_id, events.c.trial_id.in_(chunk),
                   events.c.seq > low)
            .order_by(events.c.trial_id, events.c.seq)
        )
        current: str | None = None
        batch: list[StoredEvent] = []
        for row in rows:
            if row[2] <= after[row[1]]:
                continue
            if row[1] != current:
                if current is not None:
                    yield current, batch
                current, batch = row[1], []
            batch.append(stored_event(row, experiment))
        if current is not None:
            yield current, batch


def trial_summaries(
    db: Connections,
    experiment: str,
    fold_tail: FoldTail,
    *,
    statuses: Collection[str] | None = None,
    trial_ids: Collection[str] | None = None,
) -> list[TrialSummary]:
    """The current summary of every trial (or of ``trial_ids``), in order of first event.

    A trial whose usable snapshot is at its last event is read from the snapshot alone; one
    behind (or without a usable snapshot) is folded from its snapshot (or start) through
    the events after it. ``statuses``: a hint that only these statuses are wanted (the
    caller still filters).
    """
    del statuses  # the summary columns (not yet) let SQL skip the others
    with db.transaction("reading the trials' states") as conn:
        experiment_id = db.experiment_id(conn, experiment)
        index = trial_index(conn, experiment_id, trial_ids)
        snaps = snapshot_rows(conn, experiment_id, trial_ids)
        states: dict[str, TrialState] = {}
        behind: dict[str, int] = {}
        base: dict[str, TrialState] = {}
        with collector_paused():
            for trial_id, (last, _first) in index.items():
                snap = snaps.get(trial_id)
                state = _decoded(snap[1], trial_id) if snap is not None else None
                if state is not None and snap is not None and snap[0] == last:
                    states[trial_id] = state
                    continue
                if state is not None and snap is not None and snap[0] < last:
                    base[trial_id] = state
                    behind[trial_id] = snap[0]
                else:
                    behind[trial_id] = 0
            for trial_id, rows in tails(conn, experiment_id, experiment, behind):
                states[trial_id] = fold_tail(trial_id, base.get(trial_id), rows)
    order = sorted(states, key=lambda t: index[t][1])
    return [TrialSummary.of(experiment, states[t], index[t][1]) for t in order]


def _decoded(text: str, trial_id: str) -> TrialState | None:
    try:
        return decode_state(text, trial_id)
    except EventDecodeError:
        return None  # a snapshot is a cache: the trial is folded from its events


def status_counts(db: Connections, experiment: str) -> dict[str, int]:
    """The experiment's trials per status (statuses with none left out)."""
    counts: dict[str, int] = {}
    for t in trial_summaries(db, experiment, _fold_quietly):
        counts[t.status] = counts.get(t.status, 0) + 1
    return counts


def status_counts_all(db: Connections) -> dict[str, dict[str, int]]:
    """Every experiment's trials per status, by experiment name."""
    with db.transaction("listing experiments") as conn:
        from statemachine.log.schema import experiments

        names = list(conn.execute(select(experiments.c.name)).scalars())
    return {name: status_counts(db, name) for name in names}


def _fold_quietly(trial_id: str, state: TrialState | None,
                  rows: Iterable[StoredEvent]) -> TrialState:
    from statemachine.log.replay import fold_stored

    return fold_stored(trial_id, rows, state=state, keep_steps=False).state


def attempt_rows(store: EventStore, experiment: str) -> dict[str, list[StoredEvent]]:
    """Every trial's rows, in seq order (what a per-node tally folds)."""
    grouped: dict[str, list[StoredEvent]] = {}
    for row in store.read_experiment(experiment):
        grouped.setdefault(row.trial_id, []).append(row)
    return grouped


def last_position(db: Connections, experiment: str) -> int:
    """The position of the experiment's newest event (0: none)."""
    with db.transaction("reading the log's position") as conn:
        experiment_id = db.experiment_id(conn, experiment)
        found: Any = conn.execute(
            select(func.max(events.c.position)).where(events.c.experiment_id == experiment_id)
        ).scalar()
    return int(found or 0)


def trials_after(db: Connections, experiment: str, position: int) -> list[str]:
    """The trials with an event after ``position``."""
    with db.transaction("reading what changed") as conn:
        experiment_id = db.experiment_id(conn, experiment)
        return list(conn.execute(
            select(events.c.trial_id)
            .where(events.c.experiment_id == experiment_id, events.c.position > position)
            .group_by(events.c.trial_id)
        ).scalars())
