"""What the web pages ask of the log: status counts, a filtered, sorted page of trials, the
machines, and what changed since a position.

The one module of the web view that reads trial state; it asks the read model
(:class:`statemachine.log.read.ReadModel`: each trial's newest snapshot plus the events after
it, counted and filtered there) and gives the pages rows of the ``trials`` JSON schema
(:func:`statemachine.cli.schema.summary_row`). The table's sorts are named here as the
address spells them (:data:`SORTS`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from statemachine.cli.node_hosts import Host, group_by_host
from statemachine.cli.reading import read_model
from statemachine.cli.schema import summary_row
from statemachine.domain.failures import FAILURE_KINDS

if TYPE_CHECKING:
    from statemachine.cli.output import Output
    from statemachine.log import EventStore

__all__ = ["ERROR_TYPES", "PAGE_SIZE", "SORTS", "Changes", "Page", "TrialQuery"]

#: Trials per page of the table.
PAGE_SIZE = 100
#: How the table sorts: the name in the address -> the read model's sort.
SORTS: dict[str, str] = {
    "trial": "trial_id",
    "status": "status",
    "failures": "failures",
    "restore_failures": "restore_failures",
    "preemptions": "preemptions",
}
#: The failure kinds a trial's last error can be (what the error filter offers).
ERROR_TYPES: tuple[str, ...] = tuple(sorted(FAILURE_KINDS))


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
    """The position to ask from next time."""
    trial_ids: list[str] = field(default_factory=list)
    """The trials with an event after the position asked."""


class TrialQuery:
    """Questions about the log ``store`` (open for the time of one answer)."""

    def __init__(self, store: EventStore, out: Output) -> None:
        self.store = store
        self.model = read_model(store, out)

    def experiments(self) -> list[str]:
        """The experiments' names."""
        return [info.name for info in self.store.list_experiments()]

    def status_counts(self, experiment: str) -> dict[str, int]:
        """How many trials are in each status (every status, 0 included)."""
        return self.model.status_counts(experiment)

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
        """The trials matching every filter given, sorted by ``sort`` (one of :data:`SORTS`),
        ``limit`` of them from ``offset``. ``search``: part of the trial id, any case;
        ``node``: the node of the trial's last failure (IP, hostname, node id or its start)."""
        found = self.model.trials(
            experiment, status=status, error_type=error_type, node=node,
            has_restore_failures=has_restore_failures, search=search, sort=SORTS[sort],
            descending=descending, offset=offset, limit=limit)
        return Page([summary_row(t) for t in found.items], found.total, offset, limit)

    def nodes(self, experiment: str) -> list[Host]:
        """The machines the trials ran on, worst first (as ``trial-replay nodes``)."""
        return group_by_host(self.model.nodes(experiment))

    def position(self, experiment: str) -> int:
        """The experiment's last event position (0: none)."""
        return self.model.position(experiment)

    def changed_since(self, experiment: str, position: int) -> Changes:
        """The trials with an event after ``position``, and the position to ask from next."""
        changes = self.model.changed_since(experiment, position)
        return Changes(changes.position, [t.trial_id for t in changes.trials])
