"""Seeded Monte Carlo continuation of a hypothetical trial past the end of its record.

Where a replay under another policy leaves a trial still going (it would have retried where
the recorded run gave up), what happens next was never recorded. It is drawn here from the
fitted estimates only, the same for every trial: each new attempt restores with the fitted
success chance (per attempt number, or on another node when the policy avoids failed nodes
and the log shows such retries), then trains until the median work of a completed trial is
done or a failure comes at the fitted hazard (a training failure or a preemption, in their
fitted proportion), keeping the training up to the last checkpoint. A trial that failed
deterministically fails again the same way. Every drawn event is folded through the real
state machine under the hypothetical policy: the decisions are the machine's.

Each sample draws its parameters from their posterior (Jeffreys prior) first, so the spread
of the results holds the uncertainty of the estimates as well as the luck of the draws.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from statemachine.advise.estimates import MIN_SPLIT, Estimates
from statemachine.advise.history import TrialHistory
from statemachine.advise.stats import Estimate
from statemachine.domain.compiled import step_compiled
from statemachine.domain.events import (
    CheckpointSaved,
    Event,
    RestoreSucceeded,
    TrialCompleted,
    TrialFailed,
    TrialStarted,
)
from statemachine.domain.failures import ActorError, RestoreError, TrainingError
from statemachine.domain.hypothetical import Overrides
from statemachine.domain.policy import RestorePhase, RetryPolicy
from statemachine.domain.state import TrialState
from statemachine.domain.status import Status

#: A simulated trial that has not ended after this many more attempts is counted as not
#: saved (an unlimited budget against a failure that always comes).
MAX_ATTEMPTS = 60
_RESTORE_FAILED = TrialFailed(error=RestoreError("statemachine.advise.Simulated",
                                                "simulated restore failure"))
_TRAINING_FAILED = TrialFailed(error=TrainingError("statemachine.advise.Simulated",
                                                   "simulated training failure"))
_PREEMPTED = TrialFailed(error=ActorError("statemachine.advise.Simulated",
                                          "simulated preemption", preempted=True))
_RESTORED = RestoreSucceeded()
_DONE = TrialCompleted()


def _beta(rng: random.Random, e: Estimate) -> float:
    """A draw from the Jeffreys posterior; with nothing observed, from the prior itself
    (a chance never seen is not assumed to be 1: its draws span 0 to 1)."""
    return rng.betavariate(e.events + 0.5, e.n - e.events + 0.5)


def _gamma(rng: random.Random, e: Estimate) -> float | None:
    """A draw from the Jeffreys posterior of a rate (``None``: no exposure at all)."""
    if not e.exposure:
        return None
    return rng.gammavariate(e.events + 0.5, 1 / e.exposure)


@dataclass(frozen=True)
class Theta:
    """One draw of the parameters."""

    restore_p: float
    by_number: dict[int, float]
    elsewhere: float | None
    hazard: float
    preempt: float

    def restore_chance(self, number: int, avoiding: bool) -> float:
        """The chance that restore attempt ``number`` of an episode succeeds."""
        if avoiding and number > 1 and self.elsewhere is not None:
            return self.elsewhere
        return self.by_number.get(number, self.restore_p)


def draw(estimates: Estimates, rng: random.Random) -> Theta:
    """Parameters drawn from their posterior given ``estimates``."""
    p = _beta(rng, estimates.restore)
    by_number = {k: _beta(rng, e) for k, e in estimates.restore_by_number.items()
                 if e.n >= MIN_SPLIT}
    elsewhere = _beta(rng, estimates.retry_elsewhere) \
        if estimates.retry_elsewhere.n >= MIN_SPLIT else None
    return Theta(p, by_number, elsewhere,
                 _gamma(rng, estimates.training_hazard) or 0.0,
                 _gamma(rng, estimates.preemption_rate) or 0.0)


@dataclass(frozen=True)
class Model:
    """What a continuation needs besides the parameters: the fitted durations."""

    work_h: float
    checkpoint_h: float | None
    restore_h: float
    schedule_h: float


def model_of(estimates: Estimates) -> Model | None:
    """The durations of ``estimates``; ``None`` when no trial completed (no work known)."""
    if estimates.work_s is None:
        return None
    costs = estimates.costs
    restore_s = estimates.restore_attempt_s or 0.0
    recovery_s = costs.recovery_mean_s if costs.recovery_mean_s is not None else restore_s
    gap = estimates.checkpoint_gap_s
    return Model(estimates.work_s / 3600, gap / 3600 if gap else None, restore_s / 3600,
                 max(recovery_s - restore_s, 0.0) / 3600)


@dataclass(frozen=True)
class Outcome:
    """One simulated continuation: did it complete, with how many more attempts and hours."""

    completed: bool
    attempts: int
    hours: float


def _repeat(h: TrialHistory) -> tuple[TrialFailed, float] | None:
    """A deterministic trial's failure and the training it takes to reach it (hours)."""
    failed = [(a, a.failure) for a in h.attempts if a.failure is not None
              and not a.failure.restore and not a.failure.preempted]
    if not failed:
        return None
    events = [e for e in h.events if isinstance(e, TrialFailed)]
    last = events[-1] if events else None
    if last is None:
        return None
    hours = sum(a.train_hours for a, _ in failed) / len(failed)
    return last, hours


def continue_trial(state: TrialState, h: TrialHistory, policy_of: Overrides, model: Model,
                   thetas: list[Theta], rng: random.Random, deterministic: bool) -> list[Outcome]:
    """One continuation of ``state`` per parameter draw in ``thetas``."""
    repeat = _repeat(h) if deterministic else None
    # No PolicySet is drawn: the policy stays. Its restore phase is Ray's: a drawn attempt
    # that restored trains at once (a FirstResult would end an until_first_report phase
    # there), so both phases decide a drawn failure alike and no FirstResult is folded.
    policy = policy_of(state.policy).replace(restore_phase=RestorePhase.RAY)
    starts: dict[str | None, TrialStarted] = {}
    return [_one(state.copy(), h, policy, model, theta, rng, repeat, starts)
            for theta in thetas]


def _one(st: TrialState, h: TrialHistory, policy: RetryPolicy, model: Model, theta: Theta,
         rng: random.Random, repeat: tuple[TrialFailed, float] | None,
         starts: dict[str | None, TrialStarted]) -> Outcome:
    def fold(event: Event) -> None:
        step_compiled(st, event, policy)

    recorded = h.checkpoint_progress
    progress: dict[str, float] = {}  # the simulated checkpoints' training
    done = h.progress_s / 3600
    attempts = 0
    hours = 0.0
    streak = 0
    rate = theta.hazard + theta.preempt
    while st.status is Status.PENDING and attempts < MAX_ATTEMPTS:
        checkpoint = st.latest_checkpoint
        start = starts.get(checkpoint)
        if start is None:
            start = starts[checkpoint] = TrialStarted(restore_from=checkpoint)
        fold(start)
        attempts += 1
        hours += model.schedule_h
        if _status(st) is Status.RESTORING:
            hours += model.restore_h
            chance = theta.restore_chance(streak + 1, policy.avoid_failed_nodes)
            if rng.random() >= chance:
                streak += 1
                fold(_RESTORE_FAILED)
                continue
            fold(_RESTORED)
            if checkpoint is not None:
                kept_s = progress.get(checkpoint, recorded.get(checkpoint))
                if kept_s is not None:
                    done = kept_s / 3600
        else:
            done = 0.0
        streak = 0
        if repeat is not None:
            failure, train_h = repeat
            hours += train_h
            fold(failure)
            continue
        need = max(model.work_h - done, 0.0)
        to_failure = rng.expovariate(rate) if rate > 0 else float("inf")
        if to_failure >= need:
            hours += need
            fold(_DONE)
            break
        hours += to_failure
        if model.checkpoint_h:
            kept = int(to_failure / model.checkpoint_h) * model.checkpoint_h
            if kept > 0:
                done += kept
                path = f"simulated-{attempts}"
                progress[path] = done * 3600
                fold(CheckpointSaved(checkpoint=path))
        preempted = rng.random() * rate < theta.preempt
        fold(_PREEMPTED if preempted else _TRAINING_FAILED)
    return Outcome(st.status is Status.TERMINATED, attempts, hours)


def _status(state: TrialState) -> Status:
    """The state's status (a call: a fold in between changed it)."""
    return state.status
