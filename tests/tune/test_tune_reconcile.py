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
    CountersAdopted,
    Event,
    PolicySet,
    TrialAdded,
    TrialCompleted,
    TrialFailed,
    TrialPaused,
    TrialRecreated,
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
from statemachine.tune.reconcile import (
    ADOPTED_FROM,
    ENDED_WITH_EXPERIMENT,
    RAY_STATUSES,
    REUSED_ID,
    Reconciliation,
    end_event,
    history_known,
    reconcile,
)

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
                         [(2, 2, None), (2, 1, 2), (2, 0, 2)])
def test_the_log_failure_count_wins_over_rays_stale_one_when_it_holds_the_whole_history(
    log_failures: int, ray_failures: int, put_back: int | None
) -> None:
    policy = RetryPolicy(max_failures=5)
    state = folded([e for _ in range(log_failures)
                    for e in (TrialStarted(), TrialFailed(error=BOOM))], policy)
    assert (state.status, state.failures) == (Status.PENDING, log_failures)
    plan = reconcile(state, "PENDING", ray_failures, None)
    assert plan == Reconciliation(failures=put_back)


@pytest.mark.parametrize(("log_failures", "ray_failures"), [(2, 3), (0, 1), (1, 4)])
def test_rays_higher_count_is_adopted_when_the_log_holds_part_of_the_history(
    log_failures: int, ray_failures: int
) -> None:
    """Ray counted failures the log never saw: Ray's count stands, recorded as adopted."""
    policy = RetryPolicy(max_failures=5)
    state = folded([e for _ in range(log_failures)
                    for e in (TrialStarted(), TrialFailed(error=BOOM))], policy)
    assert history_known(True, state.failures, ray_failures) == "part"
    plan = reconcile(state, "PENDING", ray_failures, None)
    assert plan == Reconciliation(adopted=CountersAdopted(failures=ray_failures,
                                                          source=ADOPTED_FROM))
    after = state.copy()
    apply(after, plan.adopted)  # type: ignore[arg-type]
    assert (after.status, after.failures) == (Status.PENDING, ray_failures)


@pytest.mark.parametrize("ray_status", ["PENDING", "ERROR", "TERMINATED", "PAUSED"])
@pytest.mark.parametrize("ray_failures", [0, 1, 2])
def test_a_trial_the_log_does_not_know_keeps_rays_counters(
    ray_status: str, ray_failures: int
) -> None:
    """The log lost (or a folder it never saw): Ray's counters are adopted, never lowered."""
    state = folded([])  # what the callback just added for the trial
    plan = reconcile(state, ray_status, ray_failures, None, known=False)
    assert plan.failures is None  # Ray's count is never overwritten
    if ray_failures:
        assert plan.adopted == CountersAdopted(failures=ray_failures, source=ADOPTED_FROM)
    else:
        assert plan.adopted is None


def test_an_ended_id_behind_a_trial_that_never_ran_is_a_new_incarnation() -> None:
    state = folded([TrialStarted(), CheckpointSaved(checkpoint=CKPT_A), TrialFailed(error=BOOM)],
                   RetryPolicy(max_failures=0))
    assert (state.status, state.failures) == (Status.ERROR, 1)
    plan = reconcile(state, "PENDING", 0, None, ray_fresh=True)
    assert plan == Reconciliation(event=TrialRecreated(reason=REUSED_ID))
    after = state.copy()
    apply(after, plan.event)  # type: ignore[arg-type]
    assert (after.status, after.failures, after.checkpoints, after.incarnation) == (
        Status.PENDING, 0, (), 1)
    # resume_errored of the same trial (it ran): a reset that keeps the counters
    assert reconcile(state, "PENDING", 1, CKPT_A) == Reconciliation(event=RESET)


END_CASES = [(log, ray) for log in Status for ray in RAY_STATUSES]


@pytest.mark.parametrize(("log_status", "ray_status"), END_CASES,
                         ids=[f"{log.value}-{ray}" for log, ray in END_CASES])
def test_the_end_of_an_experiment_leaves_the_log_at_rays_status(
    log_status: Status, ray_status: str
) -> None:
    """Whatever ended the experiment, every trial the log has live ends as Ray left it."""
    state = LOG_STATES[log_status]
    event = end_event(log_status, ray_status)
    if event is None:
        # nothing to record: already equal, or a status no event reaches (ERROR in Ray only)
        assert (log_status.value == ray_status or log_status is Status.NEW
                or log_status.is_terminal or ray_status in ("ERROR", "RUNNING")
                or (log_status, ray_status) == (Status.PENDING, "PAUSED")
                or (log_status, ray_status) == (Status.RESTORING, "PAUSED"))
        return
    after = state.copy()
    apply(after, event)
    assert after.status.value == ray_status
    if ray_status == "TERMINATED":
        assert event == TrialStopped(reason=ENDED_WITH_EXPERIMENT)


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


# ---------------------------------------------------------------- randomized driver restarts

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

#: fail: one attempt fails; snapshot: Ray saves its experiment state; restart_*: a new driver
#: restores (Ray's state up to date / stale / the log knows nothing: a folder it has not seen,
#: or a lost log); *_plain: the next driver runs without the callback.
STEPS = ["fail"] * 4 + ["snapshot"] * 2 + [
    "restart_fresh", "restart_stale", "restart_unseen", "restart_fresh_plain"]


class Driven:
    """One trial through drivers with and without the callback, as Ray and the log see it."""

    def __init__(self) -> None:
        self.policy = RetryPolicy(max_failures=1000)
        self.truth = 0  # failures over the trial's whole life (what plain Ray counts)
        self.ray_live = 0  # Ray's num_failures in the running driver
        self.ray_saved = 0  # in Ray's last experiment state
        self.log: TrialState | None = folded([], self.policy)
        self.whole = True  # the log saw every failure since the trial was created
        self.callback = True

    def record(self, event: Event) -> None:
        assert self.log is not None
        apply(self.log, event)

    def fail(self) -> None:
        self.truth += 1
        if self.callback and self.log is not None:
            self.record(TrialStarted())
            self.record(TrialFailed(error=BOOM))
            self.ray_live = self.log.failures  # Steering.follow: Ray follows the log
        else:
            self.ray_live += 1
            self.whole = False

    def restart(self, kind: str) -> None:
        if kind == "restart_fresh" or kind == "restart_fresh_plain":
            self.ray_saved = self.ray_live
        if kind == "restart_unseen":
            self.log, self.whole = None, False
        self.callback = not kind.endswith("_plain")
        restored = self.ray_saved
        if not self.callback:
            self.ray_live = restored
            return
        known = self.log is not None
        if self.log is None:
            self.log = folded([], self.policy)
        plan = reconcile(self.log, "PENDING", restored, None, known=known)
        for event in (plan.event, plan.adopted):
            if event is not None:
                self.record(event)  # the log accepts what reconcile asks to record
        handed = plan.failures if plan.failures is not None else restored
        assert handed >= restored, "a retry Ray already spent was granted"
        if self.whole:
            assert handed == self.truth
        assert self.log.failures == handed  # the log agrees with Ray
        self.ray_live = handed


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(STEPS), max_size=25))
def test_counters_handed_to_ray_are_never_lower_and_true_with_the_whole_history(
    steps: list[str]
) -> None:
    trial = Driven()
    for step in steps:
        if step == "fail":
            trial.fail()
        elif step == "snapshot":
            trial.ray_saved = trial.ray_live
        else:
            trial.restart(step)


def test_an_ended_trial_without_history_behind_a_fresh_ray_trial_is_reset() -> None:
    """Nothing tells a new trial from the same one requeued: the same counters either way."""
    state = folded([TrialStarted(), TrialCompleted()])
    assert reconcile(state, "PENDING", 0, None, ray_fresh=True) == Reconciliation(event=RESET)
