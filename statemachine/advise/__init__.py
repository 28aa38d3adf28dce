"""``advise``: which retry policy would have saved the trials a run lost, at what cost, and
the evidence it rests on.

Pure: estimates (:mod:`~statemachine.advise.estimates`), the sweep of policies replayed
through the real state machine with a seeded simulation past the end of the record
(:mod:`~statemachine.advise.sweep`, :mod:`~statemachine.advise.simulate`) and the
recommendation (:mod:`~statemachine.advise.recommend`). It reads a log only through
:mod:`~statemachine.advise.reader`; ``trial-replay advise`` is its command.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from statemachine.advise.estimates import Estimates, estimate
from statemachine.advise.history import TrialHistory
from statemachine.advise.recommend import TARGET, Recommendation, recommend
from statemachine.advise.sweep import Grid, PolicyResult, Sweep
from statemachine.domain.policy import RetryPolicy

__all__ = ["Advice", "Grid", "advise", "recorded_policy"]


@dataclass(frozen=True)
class Advice:
    """Estimates, the sweep and the recommendation of one ``advise``."""

    experiments: tuple[str, ...]
    recorded: RetryPolicy
    estimates: Estimates
    results: tuple[PolicyResult, ...]
    recommendation: Recommendation
    samples: int
    seed: int

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (schema ``advise`` in docs/cli.md)."""
        front = {id(r) for r in self.recommendation.front}
        return {
            "experiments": list(self.experiments),
            "recorded_policy": self.recorded.to_dict(),
            "samples": self.samples,
            "seed": self.seed,
            "estimates": self.estimates.to_dict(),
            "sweep": [{**r.to_dict(), "on_front": id(r) in front} for r in self.results],
            "recommendation": self.recommendation.to_dict(),
        }


def recorded_policy(histories: Sequence[TrialHistory]) -> RetryPolicy:
    """The policy most trials ended under (Ray's defaults for an empty log)."""
    counts = Counter(h.final.policy for h in histories)
    return counts.most_common(1)[0][0] if counts else RetryPolicy()


def advise(histories: Sequence[TrialHistory], grid: Grid | None = None, *,
           experiments: Sequence[str] = (), samples: int = 200, seed: int = 0,
           target: float = TARGET, keep_trials: bool = False, jobs: int = 1) -> Advice:
    """Fit, sweep and recommend over ``histories`` (the sweep in ``jobs`` processes)."""
    fitted = estimate(histories)
    sweep = Sweep(histories, fitted, samples=samples, seed=seed, keep_trials=keep_trials)
    base = recorded_policy(histories)
    results = tuple(sweep.run((grid or Grid()).changes(), base, jobs))
    chosen = recommend(fitted, results, can_simulate=sweep.can_simulate, target=target)
    return Advice(tuple(experiments), base, fitted, results, chosen, sweep.samples, seed)
