"""What the log says about a run's failures, each figure with its interval and the number
of observations behind it (schema ``advise``: ``estimates``)."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from statemachine.advise.history import TrialHistory
from statemachine.advise.stats import Estimate, poisson_rate, wilson
from statemachine.domain.status import Status

#: Fewest observations for a per-attempt-number or per-node success chance to be used by the
#: simulation instead of the overall one (and listed as telling a node apart).
MIN_SPLIT = 5


@dataclass(frozen=True)
class Deterministic:
    """A trial no budget saves, and why."""

    experiment: str
    trial_id: str
    evidence: str

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {"experiment": self.experiment, "trial_id": self.trial_id,
                "evidence": self.evidence}


@dataclass(frozen=True)
class Costs:
    """What failures cost, in seconds: lost training and the way back to training."""

    failures: int
    lost_mean_s: float | None
    lost_median_s: float | None
    recovery_mean_s: float | None
    recovery_median_s: float | None
    recoveries: int

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {"failures": self.failures, "lost_work_mean_s": self.lost_mean_s,
                "lost_work_median_s": self.lost_median_s,
                "recovery_mean_s": self.recovery_mean_s,
                "recovery_median_s": self.recovery_median_s, "recoveries": self.recoveries}


@dataclass(frozen=True)
class Estimates:
    """Everything fitted from the recorded histories."""

    restore: Estimate
    restore_by_number: dict[int, Estimate]
    restore_by_node: dict[str, Estimate]
    restore_avoiding: Estimate
    restore_not_avoiding: Estimate
    retry_elsewhere: Estimate
    retry_same_node: Estimate
    training_hazard: Estimate
    preemption_rate: Estimate
    costs: Costs
    deterministic: tuple[Deterministic, ...]
    checkpoint_gap_s: float | None
    work_s: float | None
    """Median training a completed trial needed (its work), ``None`` with none completed."""
    restore_attempt_s: float | None
    trials: int
    errored: int
    completed: int
    failures: int

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (schema ``advise``: ``estimates``)."""
        return {
            "trials": self.trials, "errored": self.errored, "completed": self.completed,
            "failures": self.failures,
            "restore_success": self.restore.to_dict(),
            "restore_success_by_attempt": {str(k): e.to_dict()
                                           for k, e in sorted(self.restore_by_number.items())},
            "restore_success_by_node": {k: e.to_dict()
                                        for k, e in sorted(self.restore_by_node.items())},
            "restore_success_avoiding_failed_nodes": self.restore_avoiding.to_dict(),
            "restore_success_not_avoiding": self.restore_not_avoiding.to_dict(),
            "retry_success_on_another_node": self.retry_elsewhere.to_dict(),
            "retry_success_on_same_node": self.retry_same_node.to_dict(),
            "training_failures_per_hour": self.training_hazard.to_dict(),
            "preemptions_per_node_hour": self.preemption_rate.to_dict(),
            "failure_cost": self.costs.to_dict(),
            "deterministic": [d.to_dict() for d in self.deterministic],
            "checkpoint_interval_s": self.checkpoint_gap_s,
            "work_per_trial_s": self.work_s,
            "restore_attempt_s": self.restore_attempt_s,
        }


def _tally(pairs: Sequence[tuple[object, bool]]) -> dict[object, list[int]]:
    counts: dict[object, list[int]] = defaultdict(lambda: [0, 0])
    for key, ok in pairs:
        counts[key][0] += ok
        counts[key][1] += 1
    return counts


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def estimate(histories: Sequence[TrialHistory]) -> Estimates:
    """Fit the estimates of ``histories`` (several experiments pooled)."""
    restores: list[tuple[object, bool]] = []
    by_number: list[tuple[object, bool]] = []
    by_node: list[tuple[object, bool]] = []
    avoiding: list[tuple[object, bool]] = []
    retries: list[tuple[object, bool]] = []
    restore_seconds: list[float] = []
    training_failures = preemptions = 0
    train_hours = 0.0
    lost: list[float] = []
    recovery: list[float] = []
    deterministic: list[Deterministic] = []
    gaps: list[float] = []
    work: list[float] = []
    failures = errored = completed = 0
    for h in histories:
        evidence = h.deterministic()
        if evidence is not None:
            deterministic.append(Deterministic(h.experiment, h.trial_id, evidence))
        errored += h.final.status is Status.ERROR
        if h.final.status is Status.TERMINATED and h.attempts and (
                h.attempts[-1].ended == "completed"):
            completed += 1
            work.append(h.progress_s)
        gaps.extend(h.checkpoint_gaps)
        for a in h.attempts:
            f = a.failure
            failures += f is not None
            if a.restore_ok is not None:
                restores.append((None, a.restore_ok))
                by_number.append((a.restore_number, a.restore_ok))
                by_node.append((a.node or "unknown", a.restore_ok))
                avoiding.append((a.avoid_failed_nodes, a.restore_ok))
                if a.previous_failed_node is not None and a.node is not None:
                    retries.append((a.node != a.previous_failed_node, a.restore_ok))
                end = a.train_start if a.restore_ok else (f.time if f else None)
                if end is not None:
                    restore_seconds.append(end - a.start)
            if evidence is None and a.train_start is not None:
                train_hours += a.train_hours
                if f is not None and not f.restore:
                    training_failures += not f.preempted
                    preemptions += f.preempted
            if f is not None and not f.restore:
                lost.append(f.lost_s)
            if f is not None and f.recovery_s is not None:
                recovery.append(f.recovery_s)
    def est(pairs: list[tuple[object, bool]], key: object) -> Estimate:
        ok, n = _tally(pairs).get(key, [0, 0])
        return wilson(ok, n)

    return Estimates(
        restore=est(restores, None),
        restore_by_number={int(k): wilson(*v) for k, v in _tally(by_number).items()
                           if isinstance(k, int)},
        restore_by_node={str(k): wilson(*v) for k, v in _tally(by_node).items()},
        restore_avoiding=est(avoiding, True),
        restore_not_avoiding=est(avoiding, False),
        retry_elsewhere=est(retries, True),
        retry_same_node=est(retries, False),
        training_hazard=poisson_rate(training_failures, train_hours),
        preemption_rate=poisson_rate(preemptions, train_hours),
        costs=Costs(len(lost), _mean(lost), _median(lost), _mean(recovery), _median(recovery),
                    len(recovery)),
        deterministic=tuple(deterministic),
        checkpoint_gap_s=_mean(gaps),
        work_s=_median(work),
        restore_attempt_s=_mean(restore_seconds),
        trials=len(histories), errored=errored, completed=completed, failures=failures,
    )
