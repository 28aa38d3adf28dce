"""The key proof: the fold decides exactly as Ray Tune's own ``Trial`` does.

Random sequences of steps (checkpoint, restore succeeded, a first result, a failure with a
real Ray exception, an abort, a driver restart resuming or restarting an errored trial) are
fed both to our fold and to a real ``ray.tune.experiment.trial.Trial``, with Ray's
``TUNE_RESTORE_RETRY_NUM`` and ``RAY_TRAIN_COUNT_PREEMPTION_AS_FAILURE`` set in the
environment, which Ray reads on every failure. ``RayController`` below makes the Ray-side
calls ``TuneController`` makes, in the same order (no cluster is started: only the trial's
bookkeeping runs, for real, including the error files it writes). After every step the failure
counter, the restore-failure counter, the recover/give-up decision and the status must be
equal.

The one thing the Trial needs that a cluster would give is a session directory for its driver
artifacts; ``TmpSessionStorage`` points it at a temporary folder.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import hypothesis
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statemachine.domain.events import (
    CheckpointSaved,
    FirstResult,
    PolicySet,
    RestoreSucceeded,
    TrialAdded,
    TrialFailed,
    TrialReset,
    TrialStarted,
)
from statemachine.domain.machine import apply
from statemachine.domain.policy import COUNT_PREEMPTION_ENV, RESTORE_RETRY_ENV, RetryPolicy
from statemachine.domain.state import TrialState
from statemachine.domain.status import Decision, Status
from statemachine.tune.ray_errors import classify_ray as classify

pytestmark = pytest.mark.ray

ray_trial = pytest.importorskip("ray.tune.experiment.trial")
rx = pytest.importorskip("ray.exceptions")

from ray.core.generated.common_pb2 import ActorDiedErrorContext, NodeDeathInfo  # noqa: E402
from ray.train import Checkpoint  # noqa: E402
from ray.train._internal.session import _TrainingResult  # noqa: E402
from ray.train._internal.storage import StorageContext  # noqa: E402
from ray.tune.error import TuneError, _AbortTrialExecution  # noqa: E402
from ray.tune.registry import register_trainable  # noqa: E402

Trial = ray_trial.Trial
TRAINABLE = "statemachine_differential_trainable"


def _trainable(config: dict[str, Any]) -> None:
    """Never run: Trial.reset() (restart_errored) looks the trainable up by name."""


class TmpSessionStorage(StorageContext):
    """Ray's storage context, with the driver session folder in a temporary directory."""

    session_root: str = ""

    def _get_session_path(self) -> str:
        return self.session_root


def _died(preempted: bool) -> BaseException:
    """An ``ActorDiedError`` built by Ray from a death context, as its deserializer does."""
    context = ActorDiedErrorContext(
        actor_id=b"\x02" * 16,
        error_message="node went away",
        node_death_info=NodeDeathInfo(
            reason=NodeDeathInfo.AUTOSCALER_DRAIN_PREEMPTED if preempted
            else NodeDeathInfo.UNEXPECTED_TERMINATION),
    )
    exc = rx.ActorDiedError(context)
    # BaseException keeps the protobuf context in .args, which cloudpickle cannot serialise
    # outside a Ray worker (handle_error pickles the exception into error.pkl). Ray has
    # already read it: actor_id, message and preempted are set.
    exc.args = (str(exc),)
    return exc


#: Real Ray exceptions as TuneController receives them from a failed actor task.
EXCEPTIONS: dict[str, Callable[[], BaseException]] = {
    "user error (RayTaskError)": lambda: rx.RayTaskError(
        "train", "Traceback\nValueError: nan", ValueError("nan")),
    "user error (dual, as ray.get raises it)": lambda: rx.RayTaskError(
        "train", "Traceback\nKeyError: 'x'", KeyError("x")).as_instanceof_cause(),
    "RayTaskError(RayActorError)": lambda: rx.RayTaskError(
        "train", "tb", rx.RayActorError(error_msg="worker died")),
    "RayTaskError(RayActorError preempted)": lambda: rx.RayTaskError(
        "train", "tb", rx.RayActorError(error_msg="worker preempted", preempted=True)),
    "RayTaskError(RayActorError preempted), dual": lambda: rx.RayTaskError(
        "train", "tb", rx.RayActorError(preempted=True)).as_instanceof_cause(),
    "RayActorError": lambda: rx.RayActorError(error_msg="actor died"),
    "RayActorError preempted": lambda: rx.RayActorError(preempted=True),
    "ActorDiedError": lambda: _died(False),
    "ActorDiedError preempted": lambda: _died(True),
    "TuneError": lambda: TuneError("driver-side failure"),
}

#: Step kinds, weighted by repetition: checkpoints early make most failures restore ones.
STEPS = ["checkpoint"] * 3 + ["restore_ok"] * 2 + ["fail"] * 8 + ["first_result"] * 2 + [
    "abort", "resume_errored", "resume_errored", "restart_errored"]


class RayController:
    """Drive a real Ray ``Trial`` the way ``ray.tune.execution.tune_controller`` does."""

    def __init__(self, root: Path, max_failures: int) -> None:
        self.root = root
        self.checkpoints = 0
        self.results = 0
        self.trial = self._new_trial(max_failures)

    def _new_trial(self, max_failures: int, trial: Any = None) -> Any:
        # TuneController.add_trial: a Trial with its storage and placement group factory.
        if trial is None:
            # Registered here, not at import: a ray.shutdown() by an earlier test module
            # clears Tune's registry.
            register_trainable(TRAINABLE, _trainable)
            storage = TmpSessionStorage(storage_path=str(self.root / "storage"),
                                        experiment_dir_name="exp", trial_dir_name="trial")
            storage.session_root = str(self.root / "session")
            trial = Trial(TRAINABLE, stub=True, max_failures=max_failures, storage=storage)
        trial.create_placement_group_factory()
        trial.init_local_path()
        return trial

    def start(self) -> None:
        """_actor_started: RUNNING, then _schedule_trial_restore if there is a checkpoint."""
        self.trial.set_status(Trial.RUNNING)
        checkpoint_result = self.trial.latest_checkpoint_result
        if checkpoint_result:
            self.trial.temporary_state.restoring_from = checkpoint_result

    def checkpoint(self) -> None:
        """_process_trial_save: the trial registers the checkpoint it saved."""
        self.checkpoints += 1
        path = self.root / f"checkpoint_{self.checkpoints:06d}"
        path.mkdir()
        self.trial.on_checkpoint(_TrainingResult(
            checkpoint=Checkpoint(str(path)),
            metrics={"training_iteration": self.checkpoints}))

    def restored(self) -> None:
        """_process_trial_restore."""
        self.trial.on_restore()
        self.trial.set_status(Trial.RUNNING)

    def result(self) -> int:
        """_on_training_result: the trial takes the result as its last one."""
        self.results += 1
        self.trial.update_last_result({"training_iteration": self.results})
        return self.results

    def fail(self, exc: BaseException) -> bool:
        """_process_trial_failure; returns whether the trial recovers."""
        self.trial.handle_error(exc)
        recover = self.trial.status == Trial.RUNNING and self.trial.should_recover()
        self._stop(error=True)
        if recover:
            self.trial.set_status(Trial.PENDING)  # _try_recover -> _requeue_trial
        return recover

    def abort(self) -> None:
        """_schedule_trial_actor / _on_trial_reset with an unusable trainable."""
        exc = _AbortTrialExecution("Invalid trainable")
        self.trial.handle_error(exc)
        self._stop(error=True)

    def _stop(self, error: bool) -> None:
        """_schedule_trial_stop."""
        self.trial.temporary_state.saving_to = None
        self.trial.temporary_state.restoring_from = None
        self.trial.set_status(Trial.ERROR if error else Trial.TERMINATED)

    def driver_restart(self, restart: bool) -> None:
        """Tuner.restore: trials come back from their JSON state (_restore_trials), then
        _requeue_restored_trials resumes (resume_errored) or restarts (restart_errored)."""
        json_state, run_metadata = self.trial.get_json_state()
        trial = Trial.from_json_state(json_state, stub=True)
        trial.restore_run_metadata(run_metadata)
        trial.set_storage(self.trial.storage)
        if restart:
            trial = self._new_trial(trial.max_failures, trial.reset())
            trial.restore_path = None
        else:
            trial.run_metadata.error_filename = None
            trial.run_metadata.pickled_error_filename = None
            trial.set_status(Trial.PENDING)
        self.trial = trial

    @property
    def counters(self) -> tuple[int, int]:
        return self.trial.num_failures, self.trial.temporary_state.num_restore_failures


step_strategy = st.sampled_from(STEPS).flatmap(
    lambda kind: st.tuples(st.just(kind), st.sampled_from(sorted(EXCEPTIONS)))
    if kind == "fail" else st.just((kind, None))
)

_example = itertools.count()


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ray-differential")


@settings(max_examples=600, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    retry_num=st.sampled_from([0, 1, 2, 5]),
    count_preemption=st.booleans(),
    max_failures=st.sampled_from([-1, 0, 1, 2, 4]),
    early_checkpoint=st.booleans(),
    steps=st.lists(step_strategy, min_size=3, max_size=40),
)
def test_fold_decides_as_rays_trial(
    root: Path, retry_num: int, count_preemption: bool, max_failures: int,
    early_checkpoint: bool, steps: list[tuple[str, str | None]],
) -> None:
    if early_checkpoint:  # then almost every failure is a restore failure
        steps = [("checkpoint", None), *steps]
    env = {RESTORE_RETRY_ENV: str(retry_num), COUNT_PREEMPTION_ENV: str(int(count_preemption))}
    with mock.patch.dict(os.environ, env):
        policy = RetryPolicy.from_env(max_failures=max_failures)
        run_steps(RayController(root / f"ex{next(_example)}", max_failures), policy, steps,
                  note=hypothesis.event)


def run_steps(ray: RayController, policy: RetryPolicy, steps: list[tuple[str, str | None]],
              note: Callable[[str], None] = lambda what: None) -> None:
    """Feed ``steps`` to both sides, comparing after each one; ``note`` what was covered."""
    state = TrialState("t1")
    apply(state, PolicySet(policy))
    apply(state, TrialAdded())
    history: list[str] = []

    def check(what: str) -> None:
        history.append(f"{what} -> {state.status} {state.counters}")
        where = "\n  ".join(history)
        assert ray.counters == (state.failures, state.restore_failures), where
        # Ray has no RESTORING status: a restoring trial is RUNNING with restoring_from set.
        restoring = state.status is Status.RESTORING
        assert ray.trial.status == ("RUNNING" if restoring else state.status.value), where
        assert ray.trial.is_restoring is restoring, where

    for kind, exc_name in steps:
        if kind in ("resume_errored", "restart_errored"):
            if state.status is Status.ERROR:
                restart = kind == "restart_errored"
                ray.driver_restart(restart)
                apply(state, TrialReset(from_scratch=restart))
                check(kind)
                note(kind)
            continue
        if state.status is Status.ERROR:
            continue
        if kind == "abort" and state.status is Status.PENDING:
            ray.abort()
            record = apply(state, TrialFailed(classify(_AbortTrialExecution("x"),
                                                       state.status)))
            assert record.decision is Decision.GIVE_UP
            check("abort")
            continue
        if state.status is Status.PENDING:
            ray.start()
            apply(state, TrialStarted())
            check("start")
        if kind == "checkpoint" and state.status is Status.RUNNING:
            ray.checkpoint()
            apply(state, CheckpointSaved(f"checkpoint_{ray.checkpoints:06d}"))
            check("checkpoint")
        elif kind == "first_result" and state.status is Status.RUNNING:
            # The first result of an attempt (the callback records no other): it must not
            # change any decision of the default policy.
            apply(state, FirstResult(iteration=ray.result()))
            check("first result")
            note("first result")
        elif kind == "restore_ok" and state.status is Status.RESTORING:
            ray.restored()
            apply(state, RestoreSucceeded())
            check("restored")
        elif kind == "fail":
            assert exc_name is not None
            phase = state.status
            recover = ray.fail(EXCEPTIONS[exc_name]())
            error = classify(EXCEPTIONS[exc_name](), phase, policy.fatal_exception_types)
            record = apply(state, TrialFailed(error))
            check(f"{phase} fail {exc_name}: {record.decision}")
            note(f"{phase} failure: {record.decision}")
            assert recover is (record.decision is not Decision.GIVE_UP)
            assert recover is (state.status is Status.PENDING)


def test_a_known_history_matches_ray(root: Path) -> None:
    """One fixed history, so a failure here reads as a story: retries, then a counted one."""
    steps = [("checkpoint", None), ("fail", "user error (RayTaskError)"),
             ("fail", "RayActorError preempted"), ("fail", "ActorDiedError"),
             ("fail", "ActorDiedError preempted"), ("restore_ok", None),
             ("fail", "RayActorError preempted"), ("restore_ok", None), ("fail", "TuneError")]
    env = {RESTORE_RETRY_ENV: "2", COUNT_PREEMPTION_ENV: "0"}
    with mock.patch.dict(os.environ, env):
        ray = RayController(root / "known", max_failures=2)
        run_steps(ray, RetryPolicy.from_env(max_failures=2), steps)
        # A user error while RUNNING counts (1); three restore failures: 2 retries, 1 counted
        # (2); restore ok; preempted while RUNNING is free; restore ok; TuneError counts (3):
        # past max_failures=2, ERROR.
        assert ray.counters == (3, 0)
        assert ray.trial.status == Trial.ERROR
