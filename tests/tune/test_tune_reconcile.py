"""The reconciliation after ``Tuner.restore``: every log status x Ray status, and the budgets.

:func:`statemachine.tune.reconcile.reconcile` is pure, so these run without Ray. Each log
state is reached by folding real events, as a driver would have recorded them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from statemachine.domain.events import (
    CheckpointSaved,
    Event,
    PolicySet,
    TrialAdded,
    TrialCompleted,
    TrialFailed,
    TrialPaused,
    TrialReset,
    TrialResumed,
    TrialStarted,
    TrialStopped,
)
from statemachine.domain.failures import RestoreError, TrainingError
from statemachine.domain.machine import apply, fold
from statemachine.domain.policy import RetryPolicy
from statemachine.domain.state import TrialState
from statemachine.domain.status import Status
from statemachine.tune.reconcile import RAY_STATUSES, Reconciliation, reconcile

CKPT_A = "/results/exp/trial_1/checkpoint_000000"
CKPT_B = "/results/exp/trial_1/checkpoint_000001"
BOOM = TrainingError("builtins.ValueError", "boom")
UNREADABLE = RestoreError("builtins.OSError", "cannot read the checkpoint")


def folded(events: list[Event], policy: RetryPolicy | None = None) -> TrialState:
    """The state a driver's log holds after ``events`` (``policy`` set first)."""
    head: list[Event] = [PolicySet(policy=policy)] if policy is not None else []
    state, _ = fold("t1", [*head, TrialAdded(), *events])
    return state


#: A trial in each log status, as recorded (NEW: a trial with no event at all).
LOG_STATES: dict[Status, TrialState] = {
    Status.NEW: TrialState("t1"),
    Status.PENDING: folded([]),
    Status.RUNNING: folded([TrialStarted()]),
    Status.RESTORING: folded([CheckpointSaved(checkpoint=CKPT_A),
                              TrialStarted(restore_from=CKPT_A)]),
    Status.PAUSED: folded([TrialStarted(), TrialPaused()]),
    Status.TERMINATED: folded([TrialStarted(), TrialCompleted()]),
    Status.ERROR: folded([TrialStarted(), TrialFailed(error=BOOM)]),
}

RESUMED = TrialResumed()
RESET = TrialReset(from_scratch=False)
STOPPED = TrialStopped(reason="not resumed by Tuner.restore")
WARN = "ERROR in Ray only"

#: log status -> {Ray status: expected event, or WARN}; a Ray status not listed: nothing.
EXPECTED: dict[Status, dict[str, Event | str]] = {
    Status.NEW: {},
    Status.PENDING: {"TERMINATED": STOPPED, "ERROR": WARN},
    Status.RUNNING: {"PENDING": RESUMED, "TERMINATED": STOPPED, "ERROR": WARN},
    Status.RESTORING: {"PENDING": RESUMED, "TERMINATED": STOPPED, "ERROR": WARN},
    Status.PAUSED: {"PENDING": RESUMED, "TERMINATED": STOPPED, "ERROR": WARN},
    Status.TERMINATED: {"PENDING": RESET, "PAUSED": RESET},
    Status.ERROR: {"PENDING": RESET, "PAUSED": RESET},
}

CASES = [(log, ray) for log in Status for ray in RAY_STATUSES]


def test_every_log_status_is_covered() -> None:
    assert {state.status for state in LOG_STATES.values()} == set(Status)
    assert all(status is state.status for status, state in LOG_STATES.items())
    assert set(EXPECTED) == set(Status)


@pytest.mark.parametrize(("log_status", "ray_status"), CASES,
                         ids=[f"{log.value}-{ray}" for log, ray in CASES])
def test_log_status_x_ray_status(log_status: Status, ray_status: str) -> None:
    state = LOG_STATES[log_status]
    before = state.copy()
    ray_failures = state.failures  # Ray's count agrees: only the event is in question
    plan = reconcile(state, ray_status, ray_failures, None)
    expected = EXPECTED[log_status].get(ray_status)
    assert plan.event == (None if expected is WARN else expected)
    assert plan.error_in_ray_only is (expected is WARN)
    assert (plan.failures, plan.restore_failures) == (None, None)
    assert state == before  # the input is never changed
    if plan.event is not None:  # the log accepts what reconcile asks to record
        after = state.copy()
        apply(after, plan.event)
        expected_after = Status.TERMINATED if plan.event == STOPPED else Status.PENDING
        assert after.status is expected_after


@pytest.mark.parametrize(("log_failures", "ray_failures", "put_back"),
                         [(2, 2, None), (2, 1, 2), (2, 0, 2), (2, 3, 2), (0, 1, 0)])
def test_the_log_failure_count_wins_over_rays_restored_one(
    log_failures: int, ray_failures: int, put_back: int | None
) -> None:
    policy = RetryPolicy(max_failures=5)
    state = folded([e for _ in range(log_failures)
                    for e in (TrialStarted(), TrialFailed(error=BOOM))], policy)
    assert (state.status, state.failures) == (Status.PENDING, log_failures)
    plan = reconcile(state, "PENDING", ray_failures, None)
    assert plan == Reconciliation(failures=put_back)


def restore_failed_twice(*, then: list[Event] | None = None) -> TrialState:
    """Checkpoint A failed to restore twice (retries, not counted); one training failure."""
    policy = RetryPolicy(max_failures=3, restore_retry_num=3)
    return folded([
        TrialStarted(), CheckpointSaved(checkpoint=CKPT_A), TrialFailed(error=BOOM),
        TrialStarted(restore_from=CKPT_A), TrialFailed(error=UNREADABLE),
        TrialStarted(restore_from=CKPT_A), TrialFailed(error=UNREADABLE),
        *(then or []),
    ], policy)


@pytest.mark.parametrize(("ray_checkpoint", "put_back"),
                         [(CKPT_A, 2), (CKPT_B, None), (None, None)])
def test_restore_failures_come_back_only_for_the_checkpoint_they_refer_to(
    ray_checkpoint: str | None, put_back: int | None
) -> None:
    state = restore_failed_twice()
    assert (state.status, state.failures, state.restore_failures) == (Status.PENDING, 1, 2)
    assert state.restoring_from == CKPT_A
    plan = reconcile(state, "PENDING", 1, ray_checkpoint)
    assert plan == Reconciliation(restore_failures=put_back)


def test_a_crash_mid_restore_resumes_with_the_spent_retries() -> None:
    state = restore_failed_twice(then=[TrialStarted(restore_from=CKPT_A)])
    assert state.status is Status.RESTORING
    plan = reconcile(state, "PENDING", 0, CKPT_A)
    assert plan == Reconciliation(event=RESUMED, failures=1, restore_failures=2)


def test_a_reset_trial_starts_a_new_restore_episode() -> None:
    policy = RetryPolicy(max_failures=0, restore_retry_num=1)
    state = folded([
        CheckpointSaved(checkpoint=CKPT_A),
        TrialStarted(restore_from=CKPT_A), TrialFailed(error=UNREADABLE),  # a retry
        TrialStarted(restore_from=CKPT_A), TrialFailed(error=UNREADABLE),  # gives up
    ], policy)
    assert (state.status, state.failures, state.restore_failures) == (Status.ERROR, 1, 1)
    # Tuner.restore(resume_errored=True): PENDING again, from the same checkpoint.
    assert reconcile(state, "PENDING", 1, CKPT_A) == Reconciliation(event=RESET)
    assert reconcile(state, "PENDING", 0, CKPT_A) == Reconciliation(event=RESET, failures=1)
    # Not resumed: the trial stays ERROR, its spent restore budget is Ray's again.
    assert reconcile(state, "ERROR", 1, CKPT_A) == Reconciliation(restore_failures=1)


def test_the_module_imports_no_ray() -> None:
    """Loaded on its own (not through the package, which checks Ray), it never imports Ray."""
    path = Path(__file__).resolve().parents[2] / "statemachine" / "tune" / "reconcile.py"
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('reconcile', {str(path)!r})\n"
        "module = sys.modules['reconcile'] = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        "assert module.reconcile is not None\n"
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=path.parents[2])
    assert out.stdout.strip() == "[]"
