"""The read model: what listings show (experiments, trials, nodes), proportional to it.

Every trial's current state is its newest usable snapshot plus a fold of only the events
after it (the way :func:`~statemachine.log.replay.rehydrate` works), so a listing reads one
snapshot row per trial instead of the experiment's history. The answers equal a full fold of
the log (a property test proves it on random logs with stale, missing and foreign
snapshots). Where history *is* the answer (``--at``, ``verify``, ``show``) the log is folded
from its events instead.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

from statemachine.domain.node_tally import NodeTally
from statemachine.domain.nodes import NodeRef
from statemachine.domain.state import TrialState
from statemachine.exceptions import UnknownTrialError, close_matches
from statemachine.log.read import sql
from statemachine.log.read.nodes import node_tallies
from statemachine.log.read.summary import (
    SORTS,
    STATUSES,
    Changes,
    ExperimentSummary,
    Page,
    TrialSummary,
)
from statemachine.log.replay import fold_stored

if TYPE_CHECKING:
    from statemachine.log.records import StoredEvent
    from statemachine.log.store import EventStore

#: Called for a row a fold stopped at (it does not decode, or does not fold), with why; the
#: trial is then shown as of the row before.
OnHalt = Callable[["StoredEvent", str], None]


def _ignore(_row: StoredEvent, _reason: str) -> None:
    return None


class ReadModel:
    """Listings of one store, from its snapshots plus the events after them.

    ``on_halt`` hears about each row a fold stopped at (the CLI warns, naming its position).
    Thread-safe as the store is: each call runs its own read transactions.
    """

    def __init__(self, store: EventStore, *, on_halt: OnHalt | None = None) -> None:
        self._store = store
        self._on_halt = on_halt or _ignore

    # ------------------------------------------------------------ experiments

    def experiments(self) -> list[ExperimentSummary]:
        """Every experiment of the log (by name) with its trials counted per status.

        One grouped query counts every experiment's fresh snapshot rows per status; only
        the trials whose snapshot is not fresh are folded.
        """
        db = self._store.connections
        counts, sizes, incomplete = sql.status_counts(db)
        found = []
        for exp_id, info in sql.experiment_rows(db):
            trials, total = sizes.get(exp_id, (0, 0))
            info = replace(info, trials=trials, events=total)
            if exp_id in incomplete:
                by_status = self._counted(info.name)
            else:
                by_status = self._complete(counts.get(exp_id))
            found.append(ExperimentSummary(info, by_status))
        return found

    def status_counts(self, experiment: str) -> dict[str, int]:
        """The experiment's trials counted per status (every status present, in order)."""
        db = self._store.connections
        with db.transaction("reading an experiment") as conn:
            exp_id = db.experiment_id(conn, experiment)
        counts, _, incomplete = sql.status_counts(db, exp_id)
        if exp_id in incomplete:
            return self._counted(experiment)
        return self._complete(counts.get(exp_id))

    def _counted(self, experiment: str) -> dict[str, int]:
        lights, _ = sql.light_rows(self._store.connections, experiment, self._fold_tail)
        counts: dict[str, int] = {}
        for light in lights:
            counts[light.status] = counts.get(light.status, 0) + 1
        return self._complete(counts)

    @staticmethod
    def _complete(counts: dict[str, int] | None) -> dict[str, int]:
        counts = counts or {}
        return {s: counts.get(s, 0) for s in STATUSES}

    # ------------------------------------------------------------ trials

    def trials(
        self,
        experiment: str,
        *,
        status: str | Collection[str] | None = None,
        error_type: str | None = None,
        node: str | None = None,
        has_restore_failures: bool | None = None,
        search: str | None = None,
        sort: str = "first_event",
        descending: bool = False,
        offset: int = 0,
        limit: int | None = None,
    ) -> Page[TrialSummary]:
        """One page of the experiment's trials as they are now.

        Filters (all optional, combined with AND): ``status`` (a status or several,
        ``"ERROR"``), ``error_type`` (the last failure's kind, ``"RestoreError"``), ``node``
        (the last failure's node: a node id or its start, an IP or a hostname; this one
        decodes every candidate's state), ``has_restore_failures``
        (``total_restore_failures > 0`` or ``== 0``), ``search`` (a part of the trial id,
        any case). ``sort``: one of :data:`SORTS`; ``offset`` and ``limit`` pick the page;
        :attr:`Page.total` counts every trial that matched. Only the page's states are
        decoded.
        """
        if sort not in SORTS:
            raise ValueError(f"sort must be one of {', '.join(SORTS)}, got {sort!r}")
        if offset < 0 or (limit is not None and limit < 0):
            raise ValueError("offset and limit must be >= 0")
        statuses = _statuses(status)
        db = self._store.connections
        lights, states = sql.light_rows(db, experiment, self._fold_tail, statuses=statuses)
        needle = search.lower() if search is not None else None
        matched = [
            t for t in lights
            if (statuses is None or t.status in statuses)
            and (error_type is None or t.error_type == error_type)
            and (has_restore_failures is None
                 or (t.total_restore_failures > 0) == has_restore_failures)
            and (needle is None or needle in t.trial_id.lower())
        ]
        if node is not None:
            states.update(sql.states(db, experiment, [t.trial_id for t in matched
                                                      if t.trial_id not in states]))
            matched = [t for t in matched if _on_node(states[t.trial_id].last_failure_node,
                                                       node)]
        matched.sort(key=_sort_key(sort), reverse=descending)
        end = None if limit is None else offset + limit
        page = matched[offset:end]
        states.update(sql.states(db, experiment, [t.trial_id for t in page
                                                  if t.trial_id not in states]))
        items = tuple(TrialSummary.of(experiment, states[t.trial_id], t.first_position)
                      for t in page)
        return Page(items, len(matched), offset, limit)

    def trial(self, experiment: str, trial_id: str) -> TrialSummary:
        """One trial as it is now; :class:`UnknownTrialError` (with near ids) if absent."""
        found = self._summaries(experiment, [trial_id])
        if not found:
            trials = self._store.list_trials(experiment)
            raise UnknownTrialError(experiment, trial_id, close_matches(trial_id, trials))
        return found[0]

    def failed_first(self, experiment: str, limit: int | None = None) -> list[str]:
        """The trials that failed (a recorded failure, whatever came after), in the order of
        their first failure; at most ``limit`` of them (``None``: all)."""
        return sql.first_failures(self._store.connections, experiment, limit)

    def summaries(self, experiment: str, trial_ids: Collection[str]) -> list[TrialSummary]:
        """The trials of ``trial_ids`` as they are now, in order of first event (an id the
        experiment does not have is left out)."""
        return self._summaries(experiment, trial_ids)

    def _summaries(self, experiment: str, trial_ids: Collection[str]) -> list[TrialSummary]:
        db = self._store.connections
        lights, states = sql.light_rows(db, experiment, self._fold_tail, trial_ids=trial_ids)
        lights.sort(key=_sort_key("first_event"))
        states.update(sql.states(db, experiment, [t.trial_id for t in lights
                                                  if t.trial_id not in states]))
        return [TrialSummary.of(experiment, states[t.trial_id], t.first_position)
                for t in lights]

    def _fold_tail(
        self, trial_id: str, state: TrialState | None, rows: Iterable[StoredEvent]
    ) -> TrialState:
        replay = fold_stored(trial_id, rows, state=state, keep_steps=False)
        if replay.halted_at is not None:
            self._on_halt(replay.halted_at, replay.halt_reason or "")
        return replay.state

    # ------------------------------------------------------------ nodes

    def nodes(self, experiment: str) -> list[NodeTally]:
        """Per node, what the experiment's attempts and failures did there; worst first
        (as :func:`~statemachine.domain.node_tally.tally_nodes` of every event).

        The sum of each trial's share as its snapshot keeps it, continued with the trial's
        attempts after the snapshot; a trial without a usable share is counted from its
        attempts (each start's restore told by the status the log recorded after it), and
        one with an attempt that does not decode, or without that status (rows imported
        from elsewhere), from all its events, up to a row that does not fold (reported
        through ``on_halt``). See :mod:`statemachine.log.read.nodes`.
        """
        return node_tallies(self._store.connections, experiment, self._on_halt)

    # ------------------------------------------------------------ live updates

    def position(self, experiment: str) -> int:
        """The position of the experiment's newest event (0: none yet)."""
        return sql.last_position(self._store.connections, experiment)

    def changed_since(self, experiment: str, position: int) -> Changes:
        """The trials with an event after ``position``, as they are now, and the position
        to ask from next time (the newest event's, read before the trials: nothing is
        missed, a trial may come twice)."""
        newest = self.position(experiment)
        changed = sql.trials_after(self._store.connections, experiment, position)
        trials = self._summaries(experiment, changed) if changed else []
        return Changes(tuple(trials), max(newest, position))


def _statuses(status: str | Collection[str] | None) -> frozenset[str] | None:
    if status is None:
        return None
    wanted = {status} if isinstance(status, str) else set(status)
    upper = frozenset(s.upper() for s in wanted)
    unknown = sorted(upper - set(STATUSES))
    if unknown:
        raise ValueError(f"unknown status {unknown[0]!r}; one of {', '.join(STATUSES)}")
    return upper


def _on_node(where: NodeRef | None, node: str) -> bool:
    if where is None:
        return False
    return bool((where.node_id and where.node_id.startswith(node))
                or node in (where.node_ip, where.hostname))


_STATUS_ORDER = {s: i for i, s in enumerate(STATUSES)}


def _sort_key(sort: str) -> Callable[[sql.Light], tuple[object, ...]]:
    def key(t: sql.Light) -> tuple[object, ...]:
        first = t.first_position
        if sort == "first_event":
            return (first,)
        if sort == "trial_id":
            return (t.trial_id, first)
        if sort == "status":
            return (_STATUS_ORDER.get(t.status, 99), first)
        if sort == "failures":
            return (t.failures, first)
        if sort == "restore_failures":
            return (t.total_restore_failures, first)
        if sort == "preemptions":
            return (t.preemptions, first)
        return (t.seq, first)
    return key
