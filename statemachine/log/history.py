"""What replay and verify read: a history from any source (a store, an export, a list).

As Temporal's replayer takes a workflow's history from wherever it was kept, the folds of
:mod:`.replay` and the checks of :mod:`.verification` read through these small protocols, not
through :class:`~statemachine.log.store.EventStore` itself: the store satisfies all of them,
and so does anything else that hands out the same rows (a test's list of
:class:`~statemachine.log.records.StoredEvent`, say). Nothing here runs SQL.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from statemachine.domain.state import TrialState
from statemachine.log.records import ExperimentInfo, FoldRow, SessionInfo, StoredEvent
from statemachine.log.snapshot import SnapshotLoad

__all__ = [
    "EventHistory",
    "ExportableHistory",
    "ReplayHistory",
    "RowHistory",
    "SnapshotHistory",
    "VerifiableHistory",
]


class EventHistory(Protocol):
    """An experiment's stored events, in position order."""

    def read_experiment(
        self,
        experiment: str,
        *,
        from_position: int = 0,
        limit: int | None = None,
        upto_time: datetime | None = None,
    ) -> Iterable[StoredEvent]:
        """The events with ``position > from_position`` (at most ``limit``; none recorded
        after ``upto_time``), in position order."""
        ...


class ReplayHistory(EventHistory, Protocol):
    """The reads of :func:`~statemachine.log.replay.replay_trial` and
    :func:`~statemachine.log.replay.replay_experiment`."""

    def read_trial(
        self,
        experiment: str,
        trial_id: str,
        *,
        upto_seq: int | None = None,
        upto_time: datetime | None = None,
    ) -> Sequence[StoredEvent]:
        """One trial's events in sequence order (up to ``upto_seq``/``upto_time``)."""
        ...

    def read_fold_rows(
        self,
        experiment: str,
        *,
        upto_position: int | None = None,
        upto_time: datetime | None = None,
    ) -> Iterable[FoldRow]:
        """The lean rows of :meth:`read_experiment` that a bulk fold needs."""
        ...


class SnapshotHistory(Protocol):
    """The reads of :func:`~statemachine.log.replay.rehydrate`: snapshots, then the tails."""

    def load_snapshot_set(self, experiment: str) -> SnapshotLoad:
        """The usable snapshots, and the trials whose snapshot is unusable."""
        ...

    def read_tails(
        self, experiment: str, *, refold: Collection[str] = ()
    ) -> Iterable[StoredEvent]:
        """The events after each trial's usable snapshot (all of those in ``refold``)."""
        ...


@runtime_checkable
class RowHistory(Protocol):
    """A history that also hands out its rows as selected, without building records: what
    :func:`~statemachine.log.verification.verify` reads when it can (a store does)."""

    def read_event_rows(self, experiment: str) -> Iterable[Sequence[Any]]:
        """The rows of :meth:`EventHistory.read_experiment`, each a tuple in the order of
        :data:`~statemachine.log.mapper.EVENT_COLUMNS` (an unreadable time as
        :class:`~statemachine.log.records.Unreadable`)."""
        ...


class VerifiableHistory(EventHistory, Protocol):
    """The reads of :func:`~statemachine.log.verification.verify`: the rows, the snapshots to check
    against the fold, and the driver sessions the rows' epochs must belong to."""

    def load_snapshots(self, experiment: str) -> dict[str, TrialState]:
        """The usable snapshot of each trial."""
        ...

    def list_sessions(self, experiment: str) -> Sequence[SessionInfo]:
        """The experiment's driver sessions, oldest first."""
        ...


class ExportableHistory(EventHistory, Protocol):
    """The reads of :func:`~statemachine.log.export_file.export_records`: the experiment's
    header, its sessions and its rows."""

    def list_experiments(self) -> Sequence[ExperimentInfo]:
        """Every experiment of the source, with its header fields."""
        ...

    def list_sessions(self, experiment: str) -> Sequence[SessionInfo]:
        """The experiment's driver sessions, oldest first."""
        ...
