"""The recommendation: the cheapest policy on the front of trials saved against extra
compute that saves nearly as many as the best one, as code to paste, with why."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from enum import Enum
from typing import Any

from statemachine.advise.estimates import Estimates
from statemachine.advise.stats import Estimate
from statemachine.advise.sweep import PolicyResult, describe
from statemachine.domain.policy import RetryPolicy

#: Fewer recorded failures than this: "not enough evidence", no number.
MIN_FAILURES = 5
#: The recommended policy saves at least this share of what the best policy of the sweep saves.
TARGET = 0.9


@dataclass(frozen=True)
class Recommendation:
    """What to use next time, or why nothing can be said."""

    verdict: str
    """``recommend``, ``keep`` (nothing to save, or no policy saves more), or
    ``not_enough_evidence``."""
    policy: PolicyResult | None
    front: tuple[PolicyResult, ...]
    why: str
    evidence: tuple[str, ...]
    code: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (schema ``advise``: ``recommendation``)."""
        return {
            "verdict": self.verdict,
            "policy": self.policy.to_dict() if self.policy is not None else None,
            "retry_policy": self.policy.policy.to_dict() if self.policy is not None else None,
            "why": self.why,
            "evidence": list(self.evidence),
            "code": list(self.code),
        }


def net(result: PolicyResult) -> float:
    """Trials saved less trials lost."""
    return result.saved_mean - result.lost


def front(results: Sequence[PolicyResult]) -> list[PolicyResult]:
    """The policies no other beats on both trials saved (net) and extra attempt-hours,
    cheapest first."""
    ordered = sorted(results, key=lambda r: (r.extra_hours, -net(r)))
    out: list[PolicyResult] = []
    best = float("-inf")
    for r in ordered:
        if net(r) > best + 1e-9:
            out.append(r)
            best = net(r)
    return out


def code(policy: RetryPolicy) -> tuple[str, ...]:
    """``RetryPolicy(...)``, ``FailureConfig(max_failures=...)`` and the environment line."""
    default = RetryPolicy()
    args = []
    for f in fields(policy):
        value = getattr(policy, f.name)
        if value != getattr(default, f.name):
            if isinstance(value, Enum):
                shown = repr(value.value)
            elif isinstance(value, tuple):
                shown = repr(list(value))
            elif isinstance(value, Mapping):
                shown = repr({k: getattr(v, "value", v) for k, v in value.items()})
            else:
                shown = repr(value)
            args.append(f"{f.name}={shown}")
    return (
        f"RetryPolicy({', '.join(args)})",
        f"FailureConfig(max_failures={policy.max_failures})",
        f"TUNE_RESTORE_RETRY_NUM={policy.restore_retry_num}",
    )


def _share(e: Estimate) -> str:
    if e.value is None:
        return "not observed"
    assert e.low is not None and e.high is not None
    return (f"{e.value:.0%} ({e.events} of {e.n}, 95% {e.low:.0%}-{e.high:.0%})")


def exposure(hours: float) -> str:
    """``89.5 h``, or ``0.124 s`` under a tenth of an hour."""
    return f"{hours * 3600:.3g} s" if hours < 0.1 else f"{hours:.1f} h"


def _rate(e: Estimate, unit: str) -> str:
    if e.value is None:
        return "not observed"
    assert e.low is not None and e.high is not None and e.exposure is not None
    return (f"{e.value:.3g} per {unit} ({e.events} in {exposure(e.exposure)}, 95% "
            f"{e.low:.3g}-{e.high:.3g})")


def evidence(estimates: Estimates) -> tuple[str, ...]:
    """The estimates a recommendation rests on, one line each."""
    lines = [
        f"a restore attempt succeeds {_share(estimates.restore)}",
        f"training fails {_rate(estimates.training_hazard, 'hour')}",
        f"preemptions: {_rate(estimates.preemption_rate, 'node-hour')}",
    ]
    if estimates.restore.n == 0:
        lines.append("no restore was recorded: a simulated restore succeeds with a chance "
                     "drawn uniformly from 0 to 1 (Jeffreys prior), so the intervals are wide")
    for d in estimates.deterministic:
        lines.append(f"no budget saves {d.trial_id}: {d.evidence}")
    return tuple(lines)


def recommend(estimates: Estimates, results: Sequence[PolicyResult], *, can_simulate: bool,
              target: float = TARGET) -> Recommendation:
    """Pick the policy to use next time from ``results``."""
    shown = tuple(front(results))
    facts = evidence(estimates)
    if estimates.failures < MIN_FAILURES or not can_simulate:
        reason = (f"only {estimates.failures} failures recorded (at least {MIN_FAILURES} "
                  "are needed)" if estimates.failures < MIN_FAILURES
                  else "no trial completed, so the work a trial needs is unknown")
        return Recommendation("not_enough_evidence", None, shown,
                              f"not enough evidence: {reason}", facts, ())
    best = max(net(r) for r in results)
    if estimates.errored == 0 or best <= 0:
        cheapest = shown[0] if shown else None
        why = ("no trial ended ERROR: nothing to save" if estimates.errored == 0 else
               "no policy of the sweep saves a trial that ended ERROR")
        return Recommendation("keep", cheapest, shown, why, facts,
                              code(cheapest.policy) if cheapest else ())
    chosen = next(r for r in shown if net(r) >= target * best - 1e-9)
    low, high = chosen.saved_interval()
    why = (f"{describe(chosen.changes)} is the cheapest policy that saves at least "
           f"{target:.0%} of what the best one does: {chosen.saved_mean:.1f} of the "
           f"{chosen.errored} trials that ended ERROR (95% {low:.0f}-{high:.0f})"
           + (f", losing {chosen.lost}" if chosen.lost else "")
           + f", for {chosen.extra_attempts:+.1f} attempts ({chosen.extra_hours:+.1f} "
           "attempt-hours)")
    return Recommendation("recommend", chosen, shown, why, facts, code(chosen.policy))
