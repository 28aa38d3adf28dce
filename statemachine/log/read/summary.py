"""What the read model answers with: a trial's current summary, a page of them, an
experiment with its status counts. Plain frozen values, built from a folded state."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

from statemachine.domain.nodes import NodeRef
from statemachine.domain.state import TrialState
from statemachine.domain.status import Status
from statemachine.log.records import ExperimentInfo

T = TypeVar("T")

#: The statuses a stored trial can have (``NEW`` exists only before a trial's first event).
STATUSES = tuple(s.value for s in Status if s is not Status.NEW)

#: The orders :meth:`ReadModel.trials` knows: ``first_event`` (the log's order: the order
#: of each trial's first event), ``trial_id``, ``status`` (in :data:`STATUSES` order),
#: ``failures`` (``num_failures``), ``restore_failures`` (``total_restore_failures``),
#: ``preemptions``, ``seq`` (how many events the trial has). Ties are broken by the order
#: of first event.
SORTS = ("first_event", "trial_id", "status", "failures", "restore_failures", "preemptions",
         "seq")


@dataclass(frozen=True, slots=True)
class TrialSummary:
    """One trial as it is now (or as of a point in the log): what listings show of it."""

    experiment: str
    trial_id: str
    status: str
    """A :class:`~statemachine.domain.status.Status` value (``"ERROR"``)."""
    num_failures: int
    num_restore_failures: int
    """Restore failures of the current restore episode."""
    total_restore_failures: int
    num_preemptions: int
    last_error_type: str | None
    """The kind of the last failure (``"RestoreError"``)."""
    last_error_cause: str | None
    """The qualified type of the exception behind it (``"builtins.OSError"``)."""
    last_error_message: str | None
    last_decision: str | None
    """A :class:`~statemachine.domain.status.Decision` value."""
    latest_checkpoint: str | None
    last_failure_node: NodeRef | None
    excluded_nodes: tuple[str, ...]
    seq: int
    """The trial's last event folded (its seq)."""
    first_position: int = 0
    """The log position of the trial's first event: listings are in this order."""

    @classmethod
    def of(cls, experiment: str, state: TrialState, first_position: int = 0) -> TrialSummary:
        """The summary of a folded state."""
        error = state.last_error
        return cls(
            experiment=experiment,
            trial_id=state.trial_id,
            status=state.status.value,
            num_failures=state.failures,
            num_restore_failures=state.restore_failures,
            total_restore_failures=state.total_restore_failures,
            num_preemptions=state.preemptions,
            last_error_type=error.kind if error else None,
            last_error_cause=error.cause_type if error else None,
            last_error_message=error.message if error else None,
            last_decision=state.last_decision.value if state.last_decision else None,
            latest_checkpoint=state.latest_checkpoint,
            last_failure_node=state.last_failure_node,
            excluded_nodes=state.excluded_nodes,
            seq=state.seq,
            first_position=first_position,
        )


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a listing: its ``items`` and how many matched in all (``total``)."""

    items: tuple[T, ...]
    total: int
    offset: int = 0
    limit: int | None = None


@dataclass(frozen=True, slots=True)
class ExperimentSummary:
    """An experiment of the log, with its trials counted per status (every status of
    :data:`STATUSES` present, zero when none)."""

    info: ExperimentInfo
    status_counts: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Changes:
    """What changed in an experiment after a log position: the trials with an event after
    it (as they are now, in order of first event), and the position to ask from next."""

    trials: tuple[TrialSummary, ...]
    position: int
