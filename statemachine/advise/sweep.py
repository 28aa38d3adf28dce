"""A sweep of retry policies over the recorded histories.

Each policy is a set of changes to the policy in force (what ``what-if`` takes). Every trial
that failed is replayed under it through the real state machine
(:func:`~statemachine.domain.hypothetical.replay_under`, ``what-if``'s own replay); a trial
that never failed folds the same under any policy and is not replayed. Where the replay
leaves a trial going past the end of its record (it gave up in the log, it would have
retried), its continuation is drawn by :mod:`statemachine.advise.simulate`, with common
random numbers across policies (a trial's draws depend on the seed and the trial only) and a
continuation computed once for every policy that leaves it in the same state under the same
effective rules.
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import random
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, fields
from typing import Any

from statemachine.advise.estimates import Estimates
from statemachine.advise.history import TrialHistory
from statemachine.advise.simulate import Model, Outcome, Theta, continue_trial, draw, model_of
from statemachine.advise.stats import quantile
from statemachine.domain.events import TrialFailed
from statemachine.domain.hypothetical import Overrides, replay_under
from statemachine.domain.policy import ExhaustionAction, RestorePhase, RetryPolicy
from statemachine.domain.state import TrialState
from statemachine.domain.status import Status

#: Continuations drawn per policy at most: with many trials to continue, fewer samples (each
#: a draw for every such trial) are taken, never fewer than :data:`MIN_SAMPLES`.
DRAW_BUDGET = 8_000
MIN_SAMPLES = 30

#: The fields a sweep varies, in the order a policy is described.
SWEPT = ("restore_retry_num", "max_failures", "on_restore_exhausted", "avoid_failed_nodes",
         "max_preemptions", "restore_phase")


@dataclass(frozen=True)
class Grid:
    """The values of each swept field (``None`` in a tuple: the recorded value)."""

    restore_retry_num: tuple[int, ...] = (0, 1, 2, 3, 4, 5)
    max_failures: tuple[int, ...] = (0, 1, 2, 3)
    on_restore_exhausted: tuple[ExhaustionAction | None, ...] = (None,)
    avoid_failed_nodes: tuple[bool | None, ...] = (None,)
    max_preemptions: tuple[int | None, ...] = (None,)
    restore_phase: tuple[RestorePhase | None, ...] = (None,)

    def changes(self) -> list[dict[str, Any]]:
        """Every combination, as what-if changes (a ``None`` value left out)."""
        values = [getattr(self, name) for name in SWEPT]
        out = []
        for combo in itertools.product(*values):
            out.append({name: v for name, v in zip(SWEPT, combo, strict=True)
                        if v is not None})
        return out


def describe(changes: Mapping[str, Any]) -> str:
    """``restore_retry_num=2 max_failures=1``."""
    return " ".join(f"{k}={getattr(v, 'value', v)}" for k, v in changes.items()) or "as recorded"


@dataclass
class TrialResult:
    """One trial under one policy."""

    trial_id: str
    experiment: str
    recorded: str
    hypothetical: str
    """The status at the end of the replay (``simulated``: continued by simulation)."""
    cut_at: int | None
    saved: float
    """Fraction of samples in which a trial that ended ERROR completes."""
    extra_attempts: float
    extra_hours: float


@dataclass
class PolicyResult:
    """What one policy would have done over the histories."""

    changes: dict[str, Any]
    policy: RetryPolicy
    errored: int
    saved: list[float]
    """Trials saved per sample (of those that ended ERROR)."""
    lost: int
    """Trials that completed in the log and would have ended ERROR (exact: a replay)."""
    extra_attempts: float
    extra_hours: float
    simulated: int
    """Trials whose continuation was simulated."""
    trials: list[TrialResult] = field(default_factory=list)

    @property
    def saved_mean(self) -> float:
        """The expected number of trials saved."""
        return sum(self.saved) / len(self.saved) if self.saved else 0.0

    def saved_interval(self) -> tuple[float, float]:
        """The 2.5 % and 97.5 % quantiles of the trials saved over the samples."""
        if not self.saved:
            return (0.0, 0.0)
        return quantile(self.saved, 0.025), quantile(self.saved, 0.975)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (schema ``advise``: ``sweep``)."""
        low, high = self.saved_interval()
        return {
            "changes": {k: getattr(v, "value", v) for k, v in self.changes.items()},
            "described": describe(self.changes),
            "errored": self.errored,
            "saved": self.saved_mean, "saved_low": low, "saved_high": high,
            "lost": self.lost,
            "extra_attempts": self.extra_attempts,
            "extra_attempt_hours": self.extra_hours,
            "simulated_trials": self.simulated,
        }


#: The sweep and base policy a forked worker runs (set just before the fork).
_FORKED: tuple[Sweep, RetryPolicy] | None = None


def _one_forked(changes: dict[str, Any]) -> PolicyResult:
    assert _FORKED is not None
    sweep, base = _FORKED
    return sweep.one(changes, base)


def _state_key(state: TrialState) -> tuple[Any, ...]:
    return tuple(getattr(state, f.name) for f in fields(state) if f.name not in ("seq",))


@dataclass
class Sweep:
    """The inputs of a sweep: histories, estimates, samples and seed."""

    histories: Sequence[TrialHistory]
    estimates: Estimates
    samples: int = 200
    """Samples asked for; after construction, the samples taken (see :data:`DRAW_BUDGET`)."""
    seed: int = 0
    keep_trials: bool = False
    _thetas: list[Theta] = field(default_factory=list)
    _model: Model | None = None
    _continued: dict[tuple[Any, ...], list[Outcome]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        deterministic = {(d.experiment, d.trial_id) for d in self.estimates.deterministic}
        self._failed = [
            (h, (h.experiment, h.trial_id) in deterministic) for h in self.histories
            if any(isinstance(e, TrialFailed) for e in h.events)
        ]
        errored = sum(h.final.status is Status.ERROR for h, _ in self._failed)
        self.samples = min(self.samples, max(MIN_SAMPLES, DRAW_BUDGET // max(errored, 1)))
        rng = random.Random(f"advise-parameters/{self.seed}")
        self._thetas = [draw(self.estimates, rng) for _ in range(self.samples)]
        self._model = model_of(self.estimates)

    @property
    def can_simulate(self) -> bool:
        """Whether a continuation can be drawn (some trial completed: its work is known)."""
        return self._model is not None

    def run(self, changes: Iterable[Mapping[str, Any]], base: RetryPolicy,
            jobs: int = 1) -> list[PolicyResult]:
        """Every policy of ``changes`` (applied to ``base`` to name the policy), in ``jobs``
        processes (forked: each reads the histories it inherited). The figures are the same
        for any ``jobs``: a continuation's draws depend on the seed and the trial only."""
        listed = [dict(c) for c in changes]
        if jobs <= 1 or len(listed) < 8 or "fork" not in mp.get_all_start_methods():
            return [self.one(c, base) for c in listed]
        global _FORKED
        _FORKED = (self, base)
        try:
            with ProcessPoolExecutor(jobs, mp_context=mp.get_context("fork")) as pool:
                chunk = max(1, len(listed) // (jobs * 4))
                return list(pool.map(_one_forked, listed, chunksize=chunk))
        finally:
            _FORKED = None

    def one(self, changes: dict[str, Any], base: RetryPolicy) -> PolicyResult:
        """One policy's result."""
        from statemachine.domain.hypothetical import hypothetical

        policy_of = Overrides(changes)
        n = self.samples
        saved = [0.0] * n
        errored = sum(h.final.status is Status.ERROR for h in self.histories)
        result = PolicyResult(changes, hypothetical(base, changes), errored, saved, 0, 0.0,
                              0.0, 0)
        for h, deterministic in self._failed:
            self._trial(h, deterministic, policy_of, result)
        return result

    def _trial(self, h: TrialHistory, deterministic: bool, policy_of: Overrides,
               result: PolicyResult) -> None:
        replayed = replay_under(h.trial_id, h.events, policy_of)
        state, recorded = replayed.state, h.final.status
        extra_attempts = extra_hours = saved = 0.0
        shown = state.status.value
        if replayed.cut_at is not None:
            first_cut = replayed.cut_at - 1
            dropped = [a for a in h.attempts if a.index >= first_cut]
            extra_attempts = -float(len(dropped))
            extra_hours = -sum(a.hours for a in dropped)
            if recorded is Status.TERMINATED and state.status is Status.ERROR:
                result.lost += 1
        elif recorded is Status.ERROR and state.status.is_live and self._model is not None:
            outcomes = self._continue(h, state, deterministic, policy_of)
            result.simulated += 1
            shown = "simulated"
            for i, o in enumerate(outcomes):
                result.saved[i] += o.completed
            saved = sum(o.completed for o in outcomes) / len(outcomes)
            extra_attempts = sum(o.attempts for o in outcomes) / len(outcomes)
            extra_hours = sum(o.hours for o in outcomes) / len(outcomes)
        result.extra_attempts += extra_attempts
        result.extra_hours += extra_hours
        if self.keep_trials:
            result.trials.append(TrialResult(h.trial_id, h.experiment, recorded.value, shown,
                                             replayed.cut_at, saved, extra_attempts,
                                             extra_hours))

    def _continue(self, h: TrialHistory, state: TrialState, deterministic: bool,
                  policy_of: Overrides) -> list[Outcome]:
        policy = policy_of(state.policy).replace(restore_phase=RestorePhase.RAY)
        key = (h.experiment, h.trial_id, _state_key(state), policy)
        done = self._continued.get(key)
        if done is None:
            assert self._model is not None
            rng = random.Random(f"advise/{self.seed}/{h.experiment}/{h.trial_id}")
            done = self._continued[key] = continue_trial(
                state, h, policy_of, self._model, self._thetas, rng, deterministic)
        return done
