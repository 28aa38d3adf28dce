"""The trial page of ``trial-replay serve``: its timeline, its failures as ``explain``
words and numbers them, the policy, each attempt and the checkpoint it restored, and every
step of ``explain``.

Nothing here decides or words a rule: the steps and the summary are
:func:`statemachine.cli.explain.explain_trial`'s, the policy line
:func:`~statemachine.cli.explain.describe_policy`'s, and the attempts read the folded states
(:func:`statemachine.cli.explain.fold_steps`): where each start restored from is the state's
``restoring_from``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from statemachine.cli.explain import Explanation, describe_policy, explain_trial, fold_steps
from statemachine.cli.reading import session_ends, session_kinds
from statemachine.cli.timeline import build_model
from statemachine.cli.timeline_svg import render_svg
from statemachine.cli.web.markup import e, experiment_href, reconstructed, table
from statemachine.domain.events import TrialStarted
from statemachine.domain.status import Status

if TYPE_CHECKING:
    from statemachine.cli.wording import Folded
    from statemachine.domain.events import Event
    from statemachine.log.records import SessionInfo, StoredEvent

__all__ = ["Attempt", "attempts", "trial_body"]


@dataclass(frozen=True)
class Attempt:
    """One start of the trial's actor and how it went."""

    number: int
    seq: int | None
    epoch: int | None
    node: str
    restored_from: str | None
    """The checkpoint the attempt restored (``None``: it started from scratch)."""
    outcome: str


def _where(f: Folded) -> tuple[int | None, int | None]:
    return (f.where.seq, f.where.epoch) if f.where is not None else (f.after.seq, None)


def attempts(folded: Sequence[Folded]) -> list[Attempt]:
    """Each start of the trial, the checkpoint it restored and how it ended: the decision
    of the failure that ended it, else the status the trial went on to."""
    found: list[Attempt] = []
    for index, f in enumerate(folded):
        if not isinstance(f.event, TrialStarted):
            continue
        restoring = f.after.status is Status.RESTORING
        outcome = f.after.status.value
        for later in folded[index + 1:]:
            if isinstance(later.event, TrialStarted):
                break
            outcome = later.after.status.value
            if later.record.error is not None:
                decision = later.record.decision.value if later.record.decision else ""
                outcome = f"failed: {later.record.error.kind}, {decision}".rstrip(", ")
                break
        node = f.event.node.describe() if f.event.node is not None else ""
        seq, epoch = _where(f)
        found.append(Attempt(len(found) + 1, seq, epoch, node,
                             f.after.restoring_from if restoring else None, outcome))
    return found


def _where_text(seq: int | None, epoch: int | None) -> str:
    return (f"seq {seq}" if seq is not None else "") + (
        f" epoch {epoch}" if epoch is not None else "")


def _failures(explanation: Explanation) -> str:
    failures = [s for s in explanation.steps if s.failure]
    if not failures:
        return "<p>No failure.</p>"
    return table(["where", "decision", "failure (as explain numbers it)"],
                 ([e(_where_text(s.seq, s.epoch)), e(s.decision or ""), e(s.text)]
                  for s in failures), css="failures")


def _attempts(found: list[Attempt]) -> str:
    if not found:
        return "<p>The trial never started.</p>"
    return table(["attempt", "where", "node", "restored checkpoint", "how it ended"],
                 ([str(a.number), e(_where_text(a.seq, a.epoch)), e(a.node),
                   e(a.restored_from) if a.restored_from else "none: from scratch",
                   e(a.outcome)] for a in found), css="attempts")


def trial_body(experiment: str, trial_id: str,
               decoded: Sequence[tuple[StoredEvent, Event]],
               sessions: list[SessionInfo]) -> tuple[str, dict[str, Any]]:
    """The trial page's body, and its explanation as ``explain --json`` has it."""
    note = reconstructed(sessions, {stored.epoch for stored, _ in decoded})
    explanation = explain_trial(trial_id, list[Any](decoded), session_ends(sessions),
                                session_kinds(sessions))
    model = build_model(experiment, [stored for stored, _ in decoded],
                        session_kinds(sessions), session_ends(sessions))
    svg = render_svg(model).split("?>", 1)[-1] if decoded else ""
    steps = table(["where", "decision", "what happened"],
                  ([e(_where_text(s.seq, s.epoch)), e(s.decision or ""), e(s.text)]
                   for s in explanation.steps), css="steps")
    body = (
        f'<nav><a href="/">experiments</a> / <a href="{experiment_href(experiment)}">'
        f"{e(experiment)}</a></nav>"
        f"<h1>Trial {e(trial_id)}</h1>"
        f'<p class="summary">{e(explanation.summary)}</p>{note}'
        f'<p class="policy">Policy that applied: '
        f"{e(describe_policy(explanation.state.policy))}.</p>"
        f"{svg}"
        f'<h2>Failures</h2>{_failures(explanation)}'
        f"<h2>Attempts and the checkpoint each restored</h2>"
        f"{_attempts(attempts(fold_steps(trial_id, list[Any](decoded))))}"
        f"<h2>Every step</h2>{steps}"
    )
    return body, explanation.to_dict(experiment)
