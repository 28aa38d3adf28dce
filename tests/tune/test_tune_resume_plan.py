"""The resume from the log after a driver crash (issue 27), without Ray: the pure rule
(:func:`statemachine.tune.resume_from_log.plan_resume`), ``result.json`` rows, and the
property that it never changes a decision or a counter, over random histories and random
stale Ray states (what ``Tuner.restore`` brings back from an older experiment snapshot).
"""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine.domain.events import (
    CheckpointSaved,
    Event,
    ResumeAdvanced,
    ResumeNotAdvanced,
    TrialAdded,
    TrialCompleted,
    TrialFailed,
    TrialStarted,
    TrialStopped,
)
from statemachine.domain.failures import TrainingError
from statemachine.domain.machine import apply, fold
from statemachine.domain.policy import RetryPolicy
from statemachine.domain.state import TrialState
from statemachine.domain.status import Status
from statemachine.tune.reconcile import NOT_RESUMED, RAY_STATUSES, reconcile
from statemachine.tune.resume_from_log import (
    PART_HISTORY,
    TURNED_OFF,
    UNKNOWN_PATH,
    ResumePlan,
    last_rows,
    plan_resume,
)

BOOM = TrainingError("builtins.ValueError", "boom")


def ckpt(i: int) -> str:
    return f"/results/exp/t1/checkpoint_{i:06d}"


def folded(events: list[Event], max_failures: int = 2) -> TrialState:
    from statemachine.domain.events import PolicySet

    state, _ = fold("t1", [PolicySet(RetryPolicy(max_failures=max_failures)), TrialAdded(),
                           *events])
    return state


def test_a_finished_trial_ray_saved_as_running_stays_finished() -> None:
    state = folded([TrialStarted(), *[CheckpointSaved(ckpt(i), i + 1) for i in range(5)],
                    TrialCompleted()])
    plan = plan_resume(state, "PENDING", ckpt(2), 0)
    assert plan == ResumePlan(finished="TERMINATED", newer=(ckpt(3), ckpt(4)))


def test_an_errored_trial_ray_saved_as_running_gets_its_error_back() -> None:
    state = folded([TrialStarted(), CheckpointSaved(ckpt(0), 1), TrialFailed(error=BOOM)],
                   max_failures=0)
    assert state.status is Status.ERROR
    assert plan_resume(state, "RUNNING", None, 0) == ResumePlan(finished="ERROR",
                                                                newer=(ckpt(0),))
    # Ray saw the error: nothing to write, resume_errored decides as Ray would
    assert plan_resume(state, "ERROR", ckpt(0), 1) == ResumePlan()


def test_a_running_trial_resumes_from_the_newer_checkpoints() -> None:
    state = folded([TrialStarted(), *[CheckpointSaved(ckpt(i), i + 1) for i in range(14)]])
    assert plan_resume(state, "PENDING", ckpt(7), 0).newer == tuple(ckpt(i)
                                                                     for i in range(8, 14))
    assert plan_resume(state, "PENDING", ckpt(13), 0) == ResumePlan()


def test_why_newer_work_is_redone() -> None:
    state = folded([TrialStarted(), CheckpointSaved(ckpt(0), 1), CheckpointSaved(ckpt(1), 2)])
    assert plan_resume(state, "PENDING", ckpt(0), 0, enabled=False).reason == TURNED_OFF
    assert plan_resume(state, "PENDING", ckpt(0), 3).reason == PART_HISTORY
    assert plan_resume(state, "PENDING", "/elsewhere/checkpoint_000000", 0).reason == \
        UNKNOWN_PATH


def test_result_rows_name_checkpoints_and_a_torn_last_line_is_skipped() -> None:
    rows = [{"training_iteration": i, "checkpoint_dir_name": f"checkpoint_{i - 1:06d}"}
            for i in (1, 2, 3)]
    text = "\n".join(json.dumps(r) for r in rows).encode() + b'\n{"training_iter'
    last, named = last_rows(text)
    assert last == rows[-1]
    assert named["checkpoint_000001"]["training_iteration"] == 2
    assert last_rows(None) == (None, {})


# ---------------------------------------------------------------- never a decision or counter

STEPS = ["start", "checkpoint", "checkpoint", "checkpoint", "fail", "complete", "snapshot"]


def _fields(state: TrialState) -> tuple[object, ...]:
    return (state.status, state.failures, state.restore_failures, state.preemptions,
            state.total_restore_failures, state.checkpoints, state.restoring_from,
            state.incarnation)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(STEPS), max_size=30), st.sampled_from(RAY_STATUSES[:3]),
       st.booleans())
def test_the_resume_from_the_log_changes_no_decision_nor_counter(
        steps: list[str], unfinished: str, enabled: bool) -> None:
    """Ray's saved state is the snapshot at the last ``snapshot`` step (or the start): its
    status (unfinished ones as ``unfinished``), failures and checkpoint. The plan's records
    change nothing in the fold, and the counters handed to Ray after it are the ones handed
    without it."""
    state = folded([])
    saved: tuple[str, int, str | None] = ("PENDING", 0, None)
    index = 0
    for step in steps:
        event: Event | None = None
        if step == "start" and state.status is Status.PENDING:
            event = TrialStarted(restore_from=state.latest_checkpoint)
        elif step == "checkpoint" and state.status is Status.RUNNING:
            event, index = CheckpointSaved(ckpt(index), index + 1), index + 1
        elif step == "fail" and state.status is Status.RUNNING:
            event = TrialFailed(error=BOOM)
        elif step == "complete" and state.status is Status.RUNNING:
            event = TrialCompleted()
        elif step == "snapshot":
            ray_status = state.status.value if state.status.is_terminal else unfinished
            saved = (ray_status, state.failures, state.latest_checkpoint)
        if event is not None:
            apply(state, event)
    ray_status, ray_failures, ray_ckpt = saved
    plan = plan_resume(state, ray_status, ray_ckpt, ray_failures, enabled=enabled)
    # only ends the log saw, only checkpoints the log recorded after Ray's
    if plan.finished is not None:
        assert state.status.is_terminal and plan.finished == state.status.value
        assert ray_status in RAY_STATUSES[:3] and enabled
    assert plan.newer == state.checkpoints[len(state.checkpoints) - len(plan.newer):]
    if ray_ckpt is not None and plan.newer:
        assert state.checkpoints.index(plan.newer[0]) > state.checkpoints.index(ray_ckpt)
    # its records change nothing in the fold
    after = state.copy()
    for record in (ResumeAdvanced(ray_ckpt, state.latest_checkpoint, 3, plan.finished),
                   ResumeNotAdvanced(state.latest_checkpoint, "missing")):
        apply(after, record)
    assert _fields(after) == _fields(state)
    # the counters Ray gets afterwards are those it got without the resume from the log
    ray_after = plan.finished or ray_status
    with_plan = reconcile(state, "PENDING" if ray_after in RAY_STATUSES[:3] else ray_after,
                          ray_failures, plan.newer[-1] if plan.newer else ray_ckpt)
    without = reconcile(state, "PENDING" if ray_status in RAY_STATUSES[:3] else ray_status,
                        ray_failures, ray_ckpt)
    handed_with = with_plan.failures if with_plan.failures is not None else ray_failures
    handed_without = without.failures if without.failures is not None else ray_failures
    assert handed_with == handed_without == max(state.failures, ray_failures)


def test_resume_from_log_is_checked_when_the_callback_is_made() -> None:
    import pickle

    import pytest

    from statemachine.exceptions import ConfigurationError
    from statemachine.tune import EventLogCallback

    for bad in ("no", 0, None):
        with pytest.raises(ConfigurationError) as info:
            EventLogCallback(resume_from_log=bad)  # type: ignore[arg-type]
        assert "resume_from_log" in str(info.value) and "True or False" in str(info.value)
    off = EventLogCallback(resume_from_log=False)
    assert pickle.loads(pickle.dumps(off)).resume_from_log is False  # back with Tuner.restore
    assert EventLogCallback().resume_from_log is True


def test_a_stop_because_the_experiment_ended_is_not_kept() -> None:
    """A driver aborted by an exception stops what is left (``TrialStopped("the experiment
    ended")``); Ray's older state still has those trials queued, and they run again."""
    from statemachine.tune.reconcile import ENDED_WITH_EXPERIMENT
    from statemachine.tune.resume_from_log import end_to_keep

    ended = [TrialStarted(), TrialStopped(ENDED_WITH_EXPERIMENT)]
    state = folded(ended)
    assert not end_to_keep(ended)
    assert not end_to_keep([TrialStarted(), TrialStopped("stopped by Tune")])
    assert end_to_keep([TrialStarted(), TrialStopped("stopped while PAUSED")])
    assert plan_resume(state, "PENDING", None, 0, keep_end=False) == ResumePlan()
    assert end_to_keep([TrialStarted(), TrialCompleted()])
    assert end_to_keep([TrialStarted(), TrialFailed(error=BOOM)])
    assert end_to_keep([TrialStopped(NOT_RESUMED)])
    assert not end_to_keep([])


# ------------------------------------------- a trial Ray created again after its last save

def _history(steps: list[str]) -> TrialState:
    """The trial's folded state after ``steps`` (as the property above plays them)."""
    state = folded([], max_failures=1)
    index = 0
    for step in steps:
        event: Event | None = None
        if step == "start" and state.status is Status.PENDING:
            event = TrialStarted(restore_from=state.latest_checkpoint)
        elif step == "checkpoint" and state.status is Status.RUNNING:
            event, index = CheckpointSaved(ckpt(index), index + 1), index + 1
        elif step == "fail" and state.status is Status.RUNNING:
            event = TrialFailed(error=BOOM)
        elif step == "complete" and state.status is Status.RUNNING:
            event = TrialCompleted()
        if event is not None:
            apply(state, event)
    return state


def test_a_regenerated_trial_follows_the_users_resume_options() -> None:
    from statemachine.tune.resume_regenerated import (
        ADVANCE,
        RESTART,
        RESTART_ERRORED,
        RESTART_UNFINISHED,
        RESUME_ERRORED,
        SCRATCH,
        SKIP,
        RegeneratedPlan,
        plan_regenerated,
    )
    from statemachine.tune.tracking import REGENERATED

    defaults = {"unfinished": "resume", "errored": "skip"}
    error, done, running = Status.ERROR, Status.TERMINATED, Status.RUNNING
    assert plan_regenerated(error, True, defaults) == RegeneratedPlan(ADVANCE)
    assert plan_regenerated(error, True, {"errored": "resume"}) == RegeneratedPlan(
        RESUME_ERRORED)
    assert plan_regenerated(error, True, {"errored": "restart"}, folder_found=False) == \
        RegeneratedPlan(RESTART, RESTART_ERRORED)
    assert plan_regenerated(error, True, defaults, folder_found=False) == RegeneratedPlan(
        SCRATCH, REGENERATED)
    assert plan_regenerated(done, True, {"unfinished": "restart"}) == RegeneratedPlan(ADVANCE)
    assert plan_regenerated(done, False, defaults) == RegeneratedPlan(SCRATCH, REGENERATED)
    assert plan_regenerated(running, True, {"unfinished": "restart"}) == RegeneratedPlan(
        SCRATCH, RESTART_UNFINISHED)
    assert plan_regenerated(running, True, {"unfinished": "skip"}) == RegeneratedPlan(SKIP)
    assert plan_regenerated(running, True, {"unfinished": "skip"}, folder_found=False) == \
        RegeneratedPlan(SCRATCH, REGENERATED)
    assert plan_regenerated(running, True, defaults, enabled=False) == RegeneratedPlan(
        SCRATCH, TURNED_OFF)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(STEPS[:-1]), max_size=30),
       st.sampled_from(["resume", "restart", "skip"]),
       st.sampled_from(["skip", "resume", "restart"]),
       st.booleans(), st.booleans())
def test_a_regenerated_trial_gets_the_counters_and_decision_rays_own_restore_gives(
        steps: list[str], unfinished: str, errored: str, enabled: bool, found: bool) -> None:
    """A trial Ray created after its last save, created again after a restore: what it is
    given is what Ray's restore gives a trial its saved state holds as the log has it (the
    same resume options), never another decision or counter; the records change nothing
    else in the fold."""
    from statemachine.domain.events import TrialReset
    from statemachine.tune.resume_regenerated import (
        ADVANCE,
        RESTART,
        RESUME_ERRORED,
        SCRATCH,
        SKIP,
        plan_regenerated,
    )

    state = _history(steps)
    plan = plan_regenerated(state.status, True, {"unfinished": unfinished,
                                                 "errored": errored},
                            enabled=enabled, folder_found=found)
    after = state.copy()
    if plan.action == RESTART:  # Ray's Trial.reset: a fresh trial, counters from 0
        assert state.status is Status.ERROR and errored == "restart" and enabled
        apply(after, TrialReset(from_scratch=True))
        assert (after.status, after.failures, after.checkpoints) == (Status.PENDING, 0, ())
    elif plan.action == RESUME_ERRORED:  # as Ray's requeue of its saved ERROR trial
        assert state.status is Status.ERROR and errored == "resume" and enabled and found
        apply(after, TrialReset(from_scratch=False))
        ray = reconcile(state, "PENDING", state.failures, state.latest_checkpoint)
        assert ray.event == TrialReset(from_scratch=False) and ray.failures is None
        assert (after.failures, after.checkpoints) == (state.failures, state.checkpoints)
        resumed = plan_resume(after, "PENDING", None, state.failures)
        assert resumed.finished is None and resumed.newer == state.checkpoints
    elif plan.action == SKIP:  # as Ray's requeue skips its saved unfinished trial
        assert state.status.is_live and unfinished == "skip" and enabled and found
        ray = reconcile(state, "TERMINATED", state.failures, state.latest_checkpoint)
        assert ray.event == TrialStopped(NOT_RESUMED) and ray.failures is None
        apply(after, TrialStopped(NOT_RESUMED))
        assert (after.status, after.failures, after.checkpoints) == (
            Status.TERMINATED, state.failures, state.checkpoints)
    elif plan.action == ADVANCE:
        assert enabled and found
        assert state.status is not Status.ERROR or errored == "skip"
        assert state.status.is_terminal or unfinished == "resume"
        kept = plan_resume(state, "PENDING", None, 0)
        assert kept.finished == (state.status.value if state.status.is_terminal else None)
    else:
        assert plan.action == SCRATCH and plan.reason
        assert not enabled or not found or (not state.status.is_terminal
                                            and unfinished == "restart")
    for record in (ResumeAdvanced(None, after.latest_checkpoint, 1, None),
                   ResumeNotAdvanced(state.latest_checkpoint, plan.reason or "")):
        before = after.copy()
        apply(after, record)
        assert _fields(after) == _fields(before)
