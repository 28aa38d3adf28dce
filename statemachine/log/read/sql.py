"""The read model's SQL: each trial's summary from its snapshot row, counts by status.

A trial's snapshot row answers for it when it is *fresh*: written by this machine's revision
(:func:`~statemachine.log.snapshot.machine_version`) at the trial's last event, with its
summary columns (revision 0004) filled in. Freshness is read from the ``(experiment, trial,
seq)`` index of the events (each trial's last seq, found by index probes whose count grows
with the trials, not the events: :mod:`statemachine.log.heads`) joined to the snapshots by
their key; the
summary columns then filter (``WHERE status IN``) and count (``GROUP BY status``) without
decoding a state. A trial whose row is not fresh (no snapshot, an older revision, events
after it, a state that did not decode) is folded from its snapshot, or its start, through
the events after it: the slower way, proportional to what is missing.

Each function runs in one read transaction of the store's pooled connections (a consistent
view that never blocks the writer).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import CTE, Connection, Subquery, and_, case, func, or_, select, text

from statemachine.domain.state import TrialState
from statemachine.exceptions import EventDecodeError
from statemachine.log.bulk import collector_paused
from statemachine.log.engine import chunks
from statemachine.log.heads import trial_heads
from statemachine.log.mapper import EVENT_COLUMNS, stored_event
from statemachine.log.records import ExperimentInfo, utc
from statemachine.log.schema import ATTEMPTS_WHERE, events, experiments, snapshots
from statemachine.log.snapshot import decode_state, machine_version

if TYPE_CHECKING:
    from statemachine.log.connections import Connections
    from statemachine.log.records import StoredEvent

#: Folds a trial's rows after a state (``None``: from its start) into its current state.
FoldTail = Callable[[str, "TrialState | None", Iterable["StoredEvent"]], TrialState]


@dataclass(frozen=True, slots=True)
class Light:
    """What a listing filters and orders by, known without decoding the trial's state."""

    trial_id: str
    first_position: int
    seq: int
    status: str
    failures: int
    total_restore_failures: int
    preemptions: int
    error_type: str | None

    @classmethod
    def of(cls, state: TrialState, first_position: int) -> Light:
        """The light row of a folded state."""
        error = state.last_error
        return cls(state.trial_id, first_position, state.seq, state.status.value,
                   state.failures, state.total_restore_failures, state.preemptions,
                   error.kind if error is not None else None)


def light_rows(
    db: Connections,
    experiment: str,
    fold_tail: FoldTail,
    *,
    statuses: Collection[str] | None = None,
    trial_ids: Collection[str] | None = None,
) -> tuple[list[Light], dict[str, TrialState]]:
    """Every trial's (or ``trial_ids``') light row, in no particular order, and the states
    that had to be decoded or folded on the way (the others' come from :func:`states`).

    ``statuses``: only trials in these statuses are needed; fresh rows in other statuses
    are left out by the database (a row that is not fresh is always returned, since its
    status is known only after its fold).
    """
    tag = machine_version()
    with db.transaction("reading the trials' states") as conn:
        experiment_id = db.experiment_id(conn, experiment)
        rows: list[Any] = []
        for last_q in _heads(experiment_id, trial_ids):
            snap = snapshots
            query = select(
                last_q.c.trial_id, last_q.c.last_seq, last_q.c.first_position, snap.c.seq,
                snap.c.status, snap.c.failures, snap.c.total_restore_failures,
                snap.c.preemptions, snap.c.error_type,
            ).select_from(last_q.outerjoin(snap, and_(
                snap.c.experiment_id == experiment_id, snap.c.trial_id == last_q.c.trial_id,
                snap.c.machine_version == tag,
            )))  # fmt: skip
            if statuses is not None:
                query = query.where(or_(
                    snap.c.seq.is_(None), snap.c.seq != last_q.c.last_seq,
                    snap.c.status.is_(None), snap.c.status.in_(sorted(statuses)),
                ))  # fmt: skip
            rows.extend(conn.execute(query))
        lights: list[Light] = []
        first: dict[str, int] = {}
        behind: dict[str, int] = {}
        decode: list[str] = []
        for trial_id, last_seq, first_position, seq, status, *counts in rows:
            first[trial_id] = first_position
            if seq is None or seq > last_seq:
                behind[trial_id] = 0  # no usable snapshot (or one ahead of the events)
            elif seq < last_seq:
                behind[trial_id] = seq
            elif status is None:
                decode.append(trial_id)
            else:
                lights.append(Light(trial_id, first_position, seq, status, *counts))
        states = _decoded_states(conn, experiment_id, [*decode, *(t for t, s in behind.items()
                                                                   if s > 0)])
        folded: dict[str, TrialState] = {}
        for trial_id in decode:
            if trial_id in states:
                folded[trial_id] = states[trial_id]
            else:
                behind[trial_id] = 0  # its state does not decode: fold it from the start
        base = {t: states.get(t) for t in behind}
        after = {t: (s if base[t] is not None else 0) for t, s in behind.items()}
        with collector_paused():
            for trial_id, tail in _tails(conn, experiment_id, experiment, after):
                folded[trial_id] = fold_tail(trial_id, base[trial_id], tail)
    lights.extend(Light.of(state, first[t]) for t, state in folded.items())
    return lights, folded


def _heads(experiment_id: int, trial_ids: Collection[str] | None) -> Iterator[Subquery | CTE]:
    """Each trial's last seq and first position: every trial's by index probes
    (:func:`~statemachine.log.heads.trial_heads`), or those of ``trial_ids`` (a chunk at a
    time) from their own rows."""
    if trial_ids is None:
        yield trial_heads(experiment_id, first=True)
        return
    for chunk in chunks(sorted(set(trial_ids))):
        yield (
            select(events.c.trial_id, func.max(events.c.seq).label("last_seq"),
                   func.min(events.c.position).label("first_position"))
            .where(events.c.experiment_id == experiment_id, events.c.trial_id.in_(chunk))
            .group_by(events.c.trial_id)
            .subquery("last")
        )


def states(db: Connections, experiment: str, trial_ids: Collection[str]) -> dict[str, TrialState]:
    """The decoded snapshot states of ``trial_ids`` (fresh rows, as :func:`light_rows`
    found them)."""
    with db.transaction("reading the trials' states") as conn:
        return _decoded_states(conn, db.experiment_id(conn, experiment), trial_ids)


def _decoded_states(
    conn: Connection, experiment_id: int, trial_ids: Collection[str]
) -> dict[str, TrialState]:
    found: dict[str, TrialState] = {}
    if not trial_ids:
        return found
    query = select(snapshots.c.trial_id, snapshots.c.state).where(
        snapshots.c.experiment_id == experiment_id,
        snapshots.c.machine_version == machine_version(),
    )
    with collector_paused():
        for chunk in chunks(sorted(set(trial_ids))):
            for trial_id, text in conn.execute(query.where(snapshots.c.trial_id.in_(chunk))):
                try:
                    found[trial_id] = decode_state(text, trial_id)
                except EventDecodeError:
                    pass  # a snapshot is a cache: the trial is folded from its events
    return found


def _tails(
    conn: Connection, experiment_id: int, experiment: str, after: dict[str, int]
) -> Iterator[tuple[str, list[StoredEvent]]]:
    """Each trial of ``after`` with its events past ``after[trial]``, trial by trial (read
    500 trials at a time: memory stays bounded by those trials' tails)."""
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


def status_counts(
    db: Connections, experiment_id: int | None = None
) -> tuple[dict[int, dict[str, int]], dict[int, tuple[int, int]], set[int]]:
    """Fresh snapshot rows counted per experiment and status, in one grouped query.

    Returns the counts, each experiment's ``(trials, events)``, and the experiments with
    trials whose row is not fresh (their counts are incomplete: :func:`light_rows` folds
    them).
    """
    tag = machine_version()
    last = trial_heads(experiment_id)
    snap = snapshots
    fresh = case(
        (and_(snap.c.seq == last.c.last_seq, snap.c.status.is_not(None)), snap.c.status),
        else_=None,
    ).label("status")
    query = (
        select(last.c.experiment_id, fresh, func.count(), func.sum(last.c.last_seq))
        .select_from(last.outerjoin(snap, and_(
            snap.c.experiment_id == last.c.experiment_id,
            snap.c.trial_id == last.c.trial_id, snap.c.machine_version == tag,
        )))
        .group_by(last.c.experiment_id, fresh)
    )
    counts: dict[int, dict[str, int]] = {}
    sizes: dict[int, tuple[int, int]] = {}
    incomplete: set[int] = set()
    with db.transaction("counting trials per status") as conn:
        for exp_id, status, trials, total in conn.execute(query):
            before = sizes.get(exp_id, (0, 0))
            sizes[exp_id] = (before[0] + trials, before[1] + int(total))
            if status is None:
                incomplete.add(exp_id)
            else:
                counts.setdefault(exp_id, {})[status] = trials
    return counts, sizes, incomplete


def experiment_rows(db: Connections) -> list[tuple[int, ExperimentInfo]]:
    """Every experiment (by name) with its id; ``trials``/``events`` left 0 (counted by
    :func:`status_counts`), its last event's time read through the position index."""
    inner = events.alias("newest")
    newest = (
        select(func.max(inner.c.position))
        .where(inner.c.experiment_id == experiments.c.id)
        .correlate(experiments)
        .scalar_subquery()
    )
    last_time = (
        select(events.c.recorded_at).where(events.c.position == newest).correlate(experiments)
    )
    query = select(
        experiments.c.id, experiments.c.name, experiments.c.storage_path,
        experiments.c.created_at, experiments.c.epoch, last_time.scalar_subquery(),
    ).order_by(experiments.c.name)  # fmt: skip
    with db.transaction("listing experiments") as conn:
        rows = conn.execute(query).all()
    return [
        (exp_id, ExperimentInfo(name, path, utc(created), epoch, 0, 0,
                                utc(last) if isinstance(last, datetime) else None))
        for exp_id, name, path, created, epoch, last in rows
    ]


def whole_trials(
    db: Connections, experiment: str, trial_ids: Collection[str]
) -> Iterator[tuple[str, list[StoredEvent]]]:
    """Every event of ``trial_ids``, trial by trial, 500 trials at a time."""
    with db.transaction("reading trials") as conn:
        experiment_id = db.experiment_id(conn, experiment)
        yield from _tails(conn, experiment_id, experiment, dict.fromkeys(trial_ids, 0))


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


def first_failures(db: Connections, experiment: str, limit: int | None) -> list[str]:
    """The trials with a failure (an event with an error type), the one that failed first
    first, at most ``limit`` of them (``None``: all), from the attempts' partial index."""
    with db.transaction("reading the failures") as conn:
        experiment_id = db.experiment_id(conn, experiment)
        first = func.min(events.c.position)
        query = (
            select(events.c.trial_id)
            # The partial index's own predicate as literal text (SQLite uses it only so).
            .where(events.c.experiment_id == experiment_id, text(ATTEMPTS_WHERE),
                   events.c.error_type.is_not(None))
            .group_by(events.c.trial_id)
            .order_by(first, events.c.trial_id)
        )
        if limit is not None:
            query = query.limit(limit)
        return list(conn.execute(query).scalars())
