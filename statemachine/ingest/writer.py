"""Record a reconstructed history in the event log, through the store's public API.

An ingest is a driver session of its own kind (``ingest``): the one mark that its events
are reconstructed, read by every view from the session the event's epoch names
(:func:`statemachine.ingest.provenance.reconstructed_epochs`). Its events carry Ray's times
as ``recorded_at`` and ids derived from their source, and are appended in one transaction
(all of them or none), each trial's after the seq the log holds (a concurrent writer is
refused by the store's sequence check, nothing written).

A log the ``EventLogCallback`` wrote for the experiment is never merged into: the callback
recorded the history as it happened, completely, and an ingest would add a second, coarser
copy of it. :func:`refuse_recorded` says so and where that log is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from statemachine.domain.state import TrialState
from statemachine.exceptions import RecordedByCallbackError, UnknownExperimentError
from statemachine.ingest.model import RayExperiment
from statemachine.ingest.reconstruct import Plan
from statemachine.log import EventStore, rehydrate
from statemachine.log.records import INGEST_KIND, AppendRequest, SessionInfo

__all__ = ["LogView", "log_view", "record_plan", "refuse_recorded"]


@dataclass(frozen=True)
class LogView:
    """What the log already holds of an experiment: its sessions, each trial's folded
    state, and the ids of its events."""

    sessions: tuple[SessionInfo, ...]
    states: dict[str, TrialState]
    event_ids: frozenset[str]

    @property
    def recorded_by_callback(self) -> tuple[SessionInfo, ...]:
        """The sessions that were not ingests: drivers with the callback."""
        return tuple(s for s in self.sessions if s.kind != INGEST_KIND)


EMPTY = LogView((), {}, frozenset())


def log_view(store: EventStore, experiment: str) -> LogView:
    """The experiment as ``store`` holds it (empty when the store does not have it)."""
    try:
        sessions = tuple(store.list_sessions(experiment))
    except UnknownExperimentError:
        return EMPTY
    ids = frozenset(e.event_id for e in store.read_experiment(experiment))
    return LogView(sessions, rehydrate(store, experiment), ids)


def refuse_recorded(view: LogView, experiment: str, where: str, read_with: str) -> None:
    """Raise :class:`RecordedByCallbackError` when the callback recorded ``experiment`` in
    the log at ``where`` (``read_with``: the ``--db`` that reads it)."""
    drivers = view.recorded_by_callback
    if not drivers:
        return
    epochs = ", ".join(str(s.epoch) for s in drivers)
    raise RecordedByCallbackError(
        f"experiment {experiment!r} in {where} was recorded by the EventLogCallback (driver "
        f"epoch(s) {epochs}): its history is complete there and an ingest would duplicate "
        f"it; nothing was ingested. Read it with: trial-replay --db {read_with} trials "
        f"{experiment}"
    )


def refuse_rewritten(ray: RayExperiment) -> None:
    """Raise :class:`RecordedByCallbackError` when ``error.txt`` headers were rewritten by
    the callback (its log is elsewhere: a URL or ``STATEMACHINE_DB_URL``)."""
    for trial in ray.trials.values():
        if any(block.rewritten for block in trial.failures):
            raise RecordedByCallbackError(
                f"{ray.label}/{trial.folder}/error.txt has failure headers written by the "
                "EventLogCallback: this experiment ran with the callback, whose log (the "
                "url it was given, or STATEMACHINE_DB_URL) holds its history; read that log "
                "instead; nothing was ingested"
            )


def _utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=timezone.utc)


def record_plan(store: EventStore, experiment: str, plan: Plan, *, storage_path: str,
                states: Sequence[TrialState] | None = None) -> int:
    """Append ``plan``'s events as one ``ingest`` session of ``experiment``; its epoch.

    One transaction for every event; snapshots of the trials it touched follow (a failed
    snapshot costs nothing: the events are the log). The session ends clean only when the
    append committed.
    """
    events = plan.events()
    session = store.start_session(experiment, policy=plan.policy, storage_path=storage_path,
                                  kind=INGEST_KIND)
    try:
        store.append_batch(
            session,
            [AppendRequest(e.trial_id, e.event, e.expected_seq, e.record, e.event_id)
             for e in events],
            returning=False,
            recorded_at=[_utc(e.time) for e in events],
        )
        touched = {e.trial_id for e in events}
        store.save_snapshots(session, states if states is not None else
                             [p.state for p in plan.trials if p.trial_id in touched])
    except BaseException:
        store.end_session(session, clean=False)
        raise
    store.end_session(session, clean=True)
    return session.epoch
