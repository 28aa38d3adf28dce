"""A trial's recorded events folded under another retry policy (what ``what-if`` and
``advise`` replay): the one owner of how a hypothetical policy is applied.

The changed fields are applied on top of whatever policy was in force at each event (the
rules per cause, ``on_cause`` and ``cause_budgets``, merged into that policy's own:
:func:`hypothetical`). When the hypothetical trial reaches a state where the next recorded
event could not have happened (it gave up earlier, say), the replay stops there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from statemachine.domain.compiled import apply_compiled
from statemachine.domain.events import Event, TrialFailed
from statemachine.domain.policy import CauseAction, RetryPolicy
from statemachine.domain.state import TrialState
from statemachine.exceptions import InvalidTransitionError


def hypothetical(policy: RetryPolicy, changes: Mapping[str, Any]) -> RetryPolicy:
    """``policy`` with ``changes`` applied (raises ``PolicyError``, one line, if invalid).

    ``on_cause`` and ``cause_budgets`` are merged into the policy's own, entry by entry; a
    budget of the policy's own whose cause is no longer retried uncounted goes with it (a
    budget given in ``changes`` is kept, and refused if its cause is not retried uncounted).
    """
    values = dict(changes)
    if "on_cause" in values or "cause_budgets" in values:
        on_cause = {**policy.on_cause, **values.get("on_cause", {})}
        uncounted = {c for c, a in on_cause.items()
                     if CauseAction(a) is CauseAction.RETRY_NOT_COUNTED}
        kept = {c: n for c, n in policy.cause_budgets.items() if c in uncounted}
        values["on_cause"] = on_cause
        values["cause_budgets"] = {**kept, **values.get("cause_budgets", {})}
    return policy.replace(**values)


class Overrides:
    """The hypothetical policy of each policy in force, made once per policy (a fold asks
    for it at every event)."""

    __slots__ = ("_last", "_made", "changes")

    def __init__(self, changes: Mapping[str, Any]) -> None:
        self.changes = changes
        self._made: dict[RetryPolicy, RetryPolicy] = {}
        self._last: tuple[RetryPolicy, RetryPolicy] | None = None

    def __call__(self, policy: RetryPolicy) -> RetryPolicy:
        """``policy`` with the changes applied."""
        last = self._last
        if last is not None and last[0] is policy:  # the common case: no hash of a policy
            return last[1]
        made = self._made.get(policy)
        if made is None:
            made = self._made[policy] = hypothetical(policy, self.changes)
        self._last = (policy, made)
        return made


@dataclass(frozen=True)
class Replayed:
    """A trial's events folded under a hypothetical policy.

    ``state``: where the hypothetical trial is; ``failures``: the ``TrialFailed`` events it
    folded; ``folded``: how many events it folded; ``cut_at``: the 1-based index of the first
    recorded event that could not have happened (``None``: every event folded).
    """

    state: TrialState
    failures: int
    folded: int
    cut_at: int | None


def replay_under(
    trial_id: str, events: Sequence[Event], overrides: Overrides | Mapping[str, Any]
) -> Replayed:
    """Fold ``events`` with the changes applied to the policy in force at each event."""
    policy_of = overrides if isinstance(overrides, Overrides) else Overrides(overrides)
    hypo = TrialState(trial_id)
    failures = 0
    cut_at: int | None = None
    index = 0
    for index, event in enumerate(events):
        try:
            apply_compiled(hypo, event, policy_of(hypo.policy))
        except InvalidTransitionError:
            cut_at = index + 1
            break
        failures += isinstance(event, TrialFailed)
    folded = len(events) if cut_at is None else cut_at - 1
    return Replayed(hypo, failures, folded, cut_at)
