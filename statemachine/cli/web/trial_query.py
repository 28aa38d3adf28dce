"""What the web pages ask of the log: status counts, a filtered, sorted page of trials, the
nodes, and what changed since a position.

This is the one module of the web view that reads trial state. Its shape is the read model's
(``statemachine.log.read_model.ReadModel``: ``status_counts``, ``trials(...) -> Page``,
``nodes``, ``position``/``changed_since``) so that moving the pages onto it changes this file
only. Until then it answers from the fold of the experiment's events
(:func:`statemachine.cli.reading.fold_states`), once per page build: correct for any log,
proportional to the experiment's history rather than to what a page shows.

Rows are the ``trials`` JSON schema (:func:`statemachine.cli.schema.trial_row`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from statemachine.cli.node_hosts import Host, group_by_host
from statemachine.cli.reading import decode_trial, fold_states, group_by_trial
from statemachine.cli.schema import STATUSES, trial_row
from statemachine.domain.node_tally import tally_nodes

if TYPE_CHECKING:
    from statemachine.cli.output import Output
    from statemachine.log import EventStore

__all__ = ["PAGE_SIZE", "SORTS", "Changes", "Page", "TrialQuery", "node_matches"]

#: Trials per page of the table.
PAGE_SIZE = 100
#: How the table sorts: the name in the address -> the row's key (ties: by trial id).
SORTS: dict[str, str] = {
    "trial": "trial_id",
    "status": "status",
    "failures": "num_failures",
    "restore_failures": "total_restore_failures",
    "preemptions": "num_preemptions",
    "error": "last_error_type",
}


@dataclass(frozen=True)
class Page:
    """One page of the trials that match a filter."""

    rows: list[dict[str, Any]]
    """The trials of this page (schema ``trials``), in the order asked."""
    total: int
    """How many trials match the filter in all."""
    offset: int
    limit: int


@dataclass(frozen=True)
class Changes:
    """What changed in an experiment after a position of the log."""

    position: int
    """The last position of the experiment now (the ``since`` of the next question)."""
    trial_ids: list[str] = field(default_factory=list)
    """The trials with an event after the position asked, in order of their first one."""


def node_matches(row: dict[str, Any], node: str) -> bool:
    """Whether the trial's last failure was on ``node`` (its IP, hostname or node id)."""
    last = row.get("last_failure_node") or {}
    return node in (last.get("node_ip"), last.get("hostname"), last.get("node_id"))


def _sort_value(row: dict[str, Any], key: str) -> tuple[int, Any]:
    value = row.get(key)
    return (1, "") if value is None else (0, value)  # no value: last


class TrialQuery:
    """Questions about the log ``store`` (open for the time of one page build)."""

    def __init__(self, store: EventStore, out: Output) -> None:
        self.store = store
        self.out = out
        self._rows: dict[str, list[dict[str, Any]]] = {}

    def experiments(self) -> list[str]:
        """The experiments' names."""
        return [info.name for info in self.store.list_experiments()]

    def _all(self, experiment: str) -> list[dict[str, Any]]:
        if experiment not in self._rows:
            self._rows[experiment] = [trial_row(s)
                                      for s in fold_states(self.store, experiment, self.out)]
        return self._rows[experiment]

    def status_counts(self, experiment: str) -> dict[str, int]:
        """How many trials are in each status (every status, 0 included)."""
        counted = Counter(row["status"] for row in self._all(experiment))
        return {status: counted.get(status, 0) for status in STATUSES}

    def error_types(self, experiment: str) -> list[str]:
        """The last error types the trials have, sorted (what the error filter offers)."""
        return sorted({row["last_error_type"] for row in self._all(experiment)
                       if row["last_error_type"]})

    def trials(
        self,
        experiment: str,
        *,
        status: str | None = None,
        error_type: str | None = None,
        node: str | None = None,
        has_restore_failures: bool | None = None,
        search: str | None = None,
        sort: str = "trial",
        descending: bool = False,
        offset: int = 0,
        limit: int = PAGE_SIZE,
    ) -> Page:
        """The trials matching every filter given, sorted by ``sort`` (one of :data:`SORTS`;
        ties by trial id), ``limit`` of them from ``offset``. ``search``: part of the trial
        id, any case; ``node``: the node of the trial's last failure."""
        rows = self._all(experiment)
        if status:
            rows = [r for r in rows if r["status"] == status]
        if error_type:
            rows = [r for r in rows if r["last_error_type"] == error_type]
        if node:
            rows = [r for r in rows if node_matches(r, node)]
        if has_restore_failures is not None:
            rows = [r for r in rows if (r["total_restore_failures"] > 0) == has_restore_failures]
        if search:
            needle = search.casefold()
            rows = [r for r in rows if needle in r["trial_id"].casefold()]
        rows = sorted(rows, key=lambda r: r["trial_id"])
        key = SORTS[sort]
        if key != "trial_id" or descending:
            rows.sort(key=lambda r: _sort_value(r, key), reverse=descending)
        return Page(rows[offset:offset + limit], len(rows), offset, limit)

    def nodes(self, experiment: str) -> list[Host]:
        """The machines the trials ran on, worst first (as ``trial-replay nodes``)."""
        pairs = [
            (trial_id, event)
            for trial_id, rows in group_by_trial(self.store.read_experiment(experiment)).items()
            for _, event in decode_trial(rows, self.out)
        ]
        return group_by_host(tally_nodes(pairs))

    def position(self, experiment: str) -> int:
        """The experiment's last event position (0: none)."""
        return self.changed_since(experiment, 0).position

    def changed_since(self, experiment: str, position: int) -> Changes:
        """The trials with an event after ``position``, and the last position now."""
        last = position
        changed: dict[str, None] = {}
        for row in self.store.read_experiment(experiment, from_position=position):
            changed.setdefault(row.trial_id)
            last = max(last, row.position)
        return Changes(last, list(changed))
