"""Replay a trial's recorded events under another retry policy.

The recorded outcome is the fold with the policies the log recorded; the hypothetical one
folds the same events with the changed fields applied on top of whatever policy was in force
at each event (the rules per cause, ``on_cause`` and ``cause_budgets``, merged into that
policy's own: :func:`hypothetical`). When the hypothetical trial reaches a state where the
next recorded event could not have happened (it gave up earlier, say), the replay is cut
there and says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from statemachine.cli.output import counted
from statemachine.domain.compiled import apply_compiled
from statemachine.domain.death import DeathCause
from statemachine.domain.events import (
    DeathCauseLearned,
    Event,
    FirstResult,
    RestoreSucceeded,
    TrialFailed,
    TrialStarted,
)
from statemachine.domain.failures import ActorError
from statemachine.domain.hypothetical import hypothetical, replay_under
from statemachine.domain.policy import RestorePhase
from statemachine.domain.state import TrialState
from statemachine.domain.status import Decision, Status
from statemachine.exceptions import InvalidTransitionError

__all__ = ["WhatIfTrial", "hypothetical", "json_changes", "what_if"]


def json_changes(changes: Mapping[str, Any]) -> dict[str, Any]:
    """The changes as JSON values (enums as their values)."""
    def plain(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: plain(v) for k, v in value.items()}
        return value.value if isinstance(value, Enum) else value

    return {k: plain(v) for k, v in changes.items()}


def outcome(state: TrialState, failed_events: int) -> str:
    """``errored`` (ended in ERROR), ``recovered`` (failed and went on) or ``clean``."""
    if state.status is Status.ERROR:
        return "errored"
    if failed_events:
        return "recovered"
    return "clean"


def summarize(state: TrialState, failed_events: int) -> dict[str, Any]:
    """The per-side summary a what-if row shows (schema ``what-if`` in docs/cli.md)."""
    return {
        "status": state.status.value,
        "outcome": outcome(state, failed_events),
        "num_failures": state.failures,
        "num_restore_failures": state.restore_failures,
        "total_restore_failures": state.total_restore_failures,
        "num_preemptions": state.preemptions,
        "last_decision": state.last_decision.value if state.last_decision else None,
        "excluded_nodes": list(state.excluded_nodes),
    }


def retries_on_failed_nodes(events: Sequence[Event]) -> int:
    """Restore attempts that started on a node where the same restore episode had already
    failed (what ``avoid_failed_nodes`` places elsewhere), whatever the recorded policy."""
    state = TrialState("what-if")
    count = 0
    for event in events:
        if isinstance(event, TrialStarted) and event.node is not None and (
            event.node.node_id in state.excluded_nodes
        ):
            count += 1
        try:
            apply_compiled(state, event, state.policy.replace(avoid_failed_nodes=True))
        except InvalidTransitionError:
            break
    return count


@dataclass(frozen=True)
class WhatIfTrial:
    """One trial, as recorded and under the hypothetical policy."""

    trial_id: str
    recorded: dict[str, Any]
    hypothetical: dict[str, Any]
    cut_at_seq: int | None
    events_cut: int
    note: str
    retries_on_failed_nodes: int = 0

    @property
    def changed(self) -> bool:
        """Whether the hypothetical outcome differs from the recorded one."""
        keys = ("status", "outcome", "num_failures", "last_decision")
        return any(self.recorded[k] != self.hypothetical[k] for k in keys)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of this row."""
        return {
            "trial_id": self.trial_id,
            "recorded": self.recorded,
            "hypothetical": self.hypothetical,
            "changed": self.changed,
            "cut_at_seq": self.cut_at_seq,
            "events_cut": self.events_cut,
            "note": self.note,
            "retries_on_failed_nodes": self.retries_on_failed_nodes,
        }


def what_if(trial_id: str, events: Sequence[Event], changes: Mapping[str, Any]) -> WhatIfTrial:
    """Fold ``events`` as recorded and with ``changes`` to the policy in force."""
    recorded = TrialState(trial_id)
    for event in events:
        apply_compiled(recorded, event)
    recorded_failures = sum(isinstance(e, TrialFailed) for e in events)

    replayed = replay_under(trial_id, events, changes)
    hypo, failures, cut_at = replayed.state, replayed.failures, replayed.cut_at
    events_cut = len(events) - cut_at + 1 if cut_at is not None else 0
    if cut_at is not None:
        note = (f"under this policy the trial is {hypo.status.value} after seq {cut_at - 1} "
                f"({_decided(hypo)}); the {counted(events_cut, 'recorded event')} from seq "
                f"{cut_at} on would not have happened and "
                + ("is cut" if events_cut == 1 else "are cut"))
    elif hypo.status.is_terminal or hypo.status == recorded.status:
        note = "same events, replayed to the end"
    else:
        note = (f"the log ends here; under this policy the trial would still be "
                f"{hypo.status.value} ({_decided(hypo)}) and would have gone on")
    on_failed = retries_on_failed_nodes(events)
    if on_failed and changes.get("avoid_failed_nodes"):
        them = "it" if on_failed == 1 else "them"
        note += (f"; {counted(on_failed, 'restore attempt')} ran on a node where that "
                 f"restore had already failed: avoid_failed_nodes places {them} on another "
                 "node (when one can host the trial)")
    first_report = RestorePhase.UNTIL_FIRST_REPORT
    if (RestorePhase(changes.get("restore_phase", RestorePhase.RAY)) is first_report
            and any(isinstance(e, RestoreSucceeded) for e in events)
            and not any(isinstance(e, FirstResult) for e in events)):
        note += ("; this log records no first result (written before FirstResult events, or "
                 "no attempt reported): every failure after a restore counts as before the "
                 "first result")
    note += _unknowns(events, changes)
    return WhatIfTrial(
        trial_id,
        summarize(recorded, recorded_failures),
        summarize(hypo, failures),
        cut_at,
        events_cut,
        note,
        on_failed,
    )


def _unknowns(events: Sequence[Event], changes: Mapping[str, Any]) -> str:
    """What the log does not hold that the changed rules read: the causes of actor deaths
    (``on_cause``), the training iteration of failures (``give_up_on_repeats``)."""
    note = ""
    failures = [e for e in events if isinstance(e, TrialFailed)]
    if "on_cause" in changes or "cause_budgets" in changes:
        learned = {e.failure_seq for e in events if isinstance(e, DeathCauseLearned)}
        unknown = sum(isinstance(e.error, ActorError) and e.error.cause is DeathCause.UNKNOWN
                      for e in failures)
        if unknown:
            note += (f"; {counted(unknown, 'actor failure')} of unknown cause (follow "
                     "on_cause unknown)")
            if learned:
                note += (", a cause learned later does not change its decision (it was "
                         "taken without it)")
    if changes.get("give_up_on_repeats") and any(e.iteration is None for e in failures):
        missing = sum(e.iteration is None for e in failures)
        note += (f"; {counted(missing, 'failure')} without a recorded training iteration "
                 "(a log written before TrialFailed version 3): never counted as a repeat")
    return note


def _decided(state: TrialState) -> str:
    decision = state.last_decision
    if decision is None:
        return "no failure decision"
    if decision is Decision.GIVE_UP:
        return "it gave up"
    return f"last decision {decision.value}"
