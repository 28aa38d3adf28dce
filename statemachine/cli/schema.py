"""The JSON shapes the CLI prints (``--json``): one function per kind of row.

This module *is* the documented schema of docs/cli.md: keys are added, never renamed or
removed, within a major version. Times are ISO 8601 in UTC.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from statemachine.domain.death import DeathCause
from statemachine.domain.node_tally import NodeTally
from statemachine.domain.nodes import NodeRef
from statemachine.domain.state import TrialState
from statemachine.domain.status import Status
from statemachine.exceptions import EventDecodeError
from statemachine.log.credentials import redact_uri
from statemachine.log.read import TrialSummary

if TYPE_CHECKING:
    from statemachine.log.records import ExperimentInfo, SessionInfo, StoredEvent

#: The statuses a user sees (``NEW`` exists only before a trial's first event).
STATUSES = tuple(s.value for s in Status if s is not Status.NEW)


def iso(moment: datetime | None) -> str | None:
    """A time as ISO 8601 (``None`` stays ``None``)."""
    return moment.isoformat() if moment is not None else None


def trial_row(state: TrialState) -> dict[str, Any]:
    """Schema ``trials``: one trial's folded state."""
    return summary_row(TrialSummary.of("", state))


def summary_row(trial: TrialSummary) -> dict[str, Any]:
    """Schema ``trials``: one trial as the read model summarizes it."""
    return {
        "trial_id": trial.trial_id,
        "status": trial.status,
        "num_failures": trial.num_failures,
        "num_restore_failures": trial.num_restore_failures,
        "total_restore_failures": trial.total_restore_failures,
        "num_preemptions": trial.num_preemptions,
        "last_error_type": trial.last_error_type,
        "last_error_cause": trial.last_error_cause,
        "last_error_message": trial.last_error_message,
        "last_decision": trial.last_decision,
        "latest_checkpoint": trial.latest_checkpoint,
        "seq": trial.seq,
        "last_failure_node": node_json(trial.last_failure_node),
        "excluded_nodes": list(trial.excluded_nodes),
    }


def node_json(node: NodeRef | None) -> dict[str, str | None] | None:
    """A node as ``{"node_id", "node_ip", "hostname"}`` (unknown fields null), or ``None``."""
    return node.to_dict() if node is not None else None


def node_row(tally: NodeTally, causes: Sequence[DeathCause] = ()) -> dict[str, Any]:
    """Schema ``nodes``: what happened on one node (``node_id`` etc. null when unknown);
    ``causes``: the causes of actor deaths that occurred in the experiment (not preempted):
    a ``"causes"`` object counts this node's by cause, when there are any."""
    by_cause = {"causes": {c.value: tally.causes.get(c, 0) for c in causes}} if causes else {}
    return {
        **tally.node.to_dict(),
        "attempts": tally.attempts,
        "restore_attempts": tally.restore_attempts,
        "training_failures": tally.training_failures,
        "restore_failures": tally.restore_failures,
        "preemptions": tally.preemptions,
        "actor_deaths": tally.actor_deaths,
        "other_failures": tally.other_failures,
        "failures": tally.failures,
        "trials": sorted(tally.trials),
        **by_cause,
    }


def event_row(row: StoredEvent) -> dict[str, Any]:
    """Schema ``show``: one recorded event with what it did (as recorded in the log)."""
    try:
        payload = row.payload
    except EventDecodeError:  # a corrupted payload still shows its recorded columns
        payload = None
    error = payload.get("error") if isinstance(payload, dict) else None
    try:
        counters = row.counters
    except EventDecodeError:
        counters = None
    node = payload.get("node") if isinstance(payload, dict) else None
    return {
        "position": row.position,
        "seq": row.seq,
        "recorded_at": iso(row.recorded_at_known),  # null: the stored time is unreadable
        "epoch": row.epoch,
        "event": row.type_name,
        "error_type": row.error_type,
        "error_cause": error.get("cause_type") if isinstance(error, dict) else None,
        "error_message": error.get("message") if isinstance(error, dict) else None,
        "status_before": row.status_before,
        "status_after": row.status_after,
        "decision": row.decision,
        "counters": counters,
        "node": node if isinstance(node, dict) else None,
    }


def session_row(session: SessionInfo, end: str) -> dict[str, Any]:
    """Schema ``experiments[].sessions``: one driver session."""
    return {
        "epoch": session.epoch,
        "host": session.host,
        "pid": session.pid,
        "started_at": iso(session.started_at),
        "ended_at": iso(session.ended_at),
        "end": end,
        "kind": session.kind,
    }


def experiment_row(
    info: ExperimentInfo,
    status_counts: dict[str, int],
    sessions: list[dict[str, Any]],
    first_event_at: datetime | None,
    renames: list[tuple[int, str, str | None]] | None = None,
) -> dict[str, Any]:
    """Schema ``experiments``: one experiment (``renames``: its earlier names)."""
    return {
        "name": info.name,
        # Credentials in a storage URI are never shown (a log written before they were
        # redacted on the way in may hold them).
        "storage_path": redact_uri(info.storage_path) if info.storage_path else None,
        "created_at": iso(info.created_at),
        "current_epoch": info.epoch,
        "trials": info.trials,
        "events": info.events,
        "status_counts": {s: status_counts.get(s, 0) for s in STATUSES},
        "sessions": sessions,
        "first_event_at": iso(first_event_at),
        "last_event_at": iso(info.last_recorded_at),
        "renamed_from": [
            {"name": name, "storage_path": redact_uri(path) if path else None, "epoch": epoch}
            for epoch, name, path in renames or []
        ],
    }
