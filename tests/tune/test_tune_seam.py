"""The error seam on real ``ray.tune.experiment.Trial`` objects, with a real SQLite log.

These drive Ray's own ``Trial.handle_error``/``should_recover`` (wrapped by the seam) with
Ray's own exception types, without a Tune run: cases a short real run cannot produce on one
machine (a preempted node) or needs exact control of (the checkpoint a restored trial has).
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import Any

import pytest

from statemachine.domain.policy import RetryPolicy
from statemachine.domain.status import Status
from tests.tune.tunekit import replay, stored_events

pytestmark = [pytest.mark.ray]


def make_trial(tmp_path: Path, experiment: str, *, like: Any = None,
               max_failures: int = 3) -> Any:
    """A real Tune trial of ``experiment`` stored under ``tmp_path``.

    ``like``: the trial as Tune restores it after a driver restart (same id and folder).
    """
    from ray.train._internal.storage import StorageContext
    from ray.tune.experiment import Trial

    storage = StorageContext(storage_path=str(tmp_path / "results"),
                             experiment_dir_name=experiment)
    trial = Trial("__fake", stub=True, storage=storage, max_failures=max_failures,
                  trial_id=like.trial_id if like is not None else None)
    if like is not None:
        trial.relative_logdir = like.relative_logdir
        trial.storage.trial_dir_name = like.storage.trial_dir_name
    trial.init_local_path()
    return trial


def add_checkpoint(trial: Any, name: str) -> str:
    """Register a checkpoint folder with the trial, as Tune does after a save."""
    from ray.train import Checkpoint
    from ray.train._internal.session import _TrainingResult

    path = Path(trial.storage.trial_fs_path, name)
    path.mkdir(parents=True, exist_ok=True)
    trial.run_metadata.checkpoint_manager.register_checkpoint(
        _TrainingResult(checkpoint=Checkpoint(path=str(path)), metrics={}))
    return str(path)


def start(callback: Any, trial: Any) -> None:
    """What Tune does when an actor starts: the hook, then the restore when it has one."""
    callback.on_trial_start(iteration=0, trials=[trial], trial=trial)
    trial.temporary_state.restoring_from = trial.latest_checkpoint_result


def test_install_is_idempotent(ray_cluster: None) -> None:
    from ray.tune.experiment import Trial

    from statemachine.tune import seam

    seam.install()
    first = Trial.__dict__["handle_error"]
    seam.install()
    assert Trial.__dict__["handle_error"] is first
    assert seam.installed()
    assert not getattr(first.__wrapped__, "__statemachine_seam__", False)


def test_preemption_budget_overrides_ray(ray_cluster: None, tmp_path: Path) -> None:
    from ray.exceptions import RayActorError

    from statemachine.tune import EventLogCallback

    url = f"sqlite:///{tmp_path / 'log.db'}"
    callback = EventLogCallback(url=url, policy=RetryPolicy(max_failures=3, max_preemptions=1))
    callback.setup()
    trial = make_trial(tmp_path, "preempt")
    callback.on_step_begin(iteration=0, trials=[trial])
    try:
        start(callback, trial)
        trial.handle_error(RayActorError(preempted=True))
        assert (trial.num_failures, trial.should_recover()) == (0, True)
        start(callback, trial)
        trial.handle_error(RayActorError(preempted=True))
        # Ray alone would recover (0 <= max_failures=3); the preemption budget is spent.
        assert type(trial).should_recover.__wrapped__(trial) is True
        assert (trial.num_failures, trial.should_recover()) == (0, False)
    finally:
        callback.on_experiment_end(trials=[trial])
    (state,) = replay(url, "preempt").values()
    assert (state.status, state.failures, state.preemptions) == (Status.ERROR, 0, 2)
    text = Path(trial.error_file).read_text()
    # numbered as explain numbers them: uncounted preemptions, not failures (still 0)
    assert re.search(r"^Preemption # 1 \(occurred at [^)]*\) \[ActorError, not counted as a "
                     r"failure; decision RECOVER_PREEMPTED\]$", text, re.M)
    assert re.search(r"^Preemption # 2 \(occurred at [^)]*\) \[ActorError, not counted as a "
                     r"failure; decision GIVE_UP\]$", text, re.M)


def test_restore_counter_comes_back_only_for_the_same_checkpoint(
    ray_cluster: None, tmp_path: Path
) -> None:
    from statemachine.tune import EventLogCallback, seam

    url = f"sqlite:///{tmp_path / 'log.db'}"
    first = EventLogCallback(url=url, policy=RetryPolicy(max_failures=3, restore_retry_num=2))
    first.setup()
    same, other = make_trial(tmp_path, "budget"), make_trial(tmp_path, "budget")
    first.on_step_begin(iteration=0, trials=[same, other])
    for trial in (same, other):
        start(first, trial)
        checkpoint = add_checkpoint(trial, "checkpoint_000000")
        first.on_checkpoint(iteration=0, trials=[], trial=trial,
                            checkpoint=trial.latest_checkpoint_result.checkpoint)
        trial.handle_error(RuntimeError("training failed"))
        for _ in range(2):
            start(first, trial)
            trial.handle_error(OSError(f"cannot read {checkpoint}"))
        assert (trial.num_failures, trial.temporary_state.num_restore_failures) == (1, 2)
    # The driver dies here: no on_experiment_end. A new driver unpickles the callback.
    seam.remove_listener(first)
    second = pickle.loads(pickle.dumps(first))
    second.setup()
    restored_same = make_trial(tmp_path, "budget", like=same)
    restored_other = make_trial(tmp_path, "budget", like=other)
    add_checkpoint(restored_same, "checkpoint_000000")
    add_checkpoint(restored_other, "checkpoint_000000")
    add_checkpoint(restored_other, "checkpoint_000001")  # Ray knows a newer one
    try:
        second.on_step_begin(iteration=0, trials=[restored_same, restored_other])
        assert restored_same.num_failures == restored_other.num_failures == 1
        assert restored_same.temporary_state.num_restore_failures == 2
        assert restored_other.temporary_state.num_restore_failures == 0
        # The spent budget stays spent: the next restore failure counts at once.
        start(second, restored_same)
        restored_same.handle_error(OSError("still unreadable"))
        assert restored_same.num_failures == 2
        # Another checkpoint is another restore episode: its failure is a retry again.
        start(second, restored_other)
        restored_other.handle_error(OSError("newer one unreadable too"))
        assert restored_other.num_failures == 1
        assert restored_other.temporary_state.num_restore_failures == 1
    finally:
        second.on_experiment_end(trials=[restored_same, restored_other])
    states = replay(url, "budget")
    assert states[same.trial_id].failures == 2
    assert states[same.trial_id].total_restore_failures == 3
    assert (states[other.trial_id].failures, states[other.trial_id].restore_failures) == (1, 1)


def test_a_failing_hook_never_raises_into_tune(ray_cluster: None, tmp_path: Path) -> None:
    from statemachine.tune import EventLogCallback

    class Broken:
        """A trial every read of which fails (``trial=None`` is no error: Tune's signature
        allows it, see test_tune_hook_arguments.py)."""

        def __getattr__(self, name: str) -> Any:
            raise RuntimeError(f"broken trial: {name}")

    callback = EventLogCallback(url=f"sqlite:///{tmp_path / 'log.db'}")
    callback.setup()
    try:
        assert callback.on_trial_start(iteration=0, trials=[Broken()], trial=Broken()) is None
        assert callback.on_trial_complete(iteration=0, trials=[], trial=Broken()) is None
        assert callback.hook_errors == 2
    finally:
        callback.on_experiment_end(trials=[])


def test_an_errored_trial_resumed_by_tuner_restore_is_reset(
    ray_cluster: None, tmp_path: Path
) -> None:
    from statemachine.tune import EventLogCallback

    url = f"sqlite:///{tmp_path / 'log.db'}"
    first = EventLogCallback(url=url, policy=RetryPolicy(max_failures=0))
    first.setup()
    trial = make_trial(tmp_path, "reset", max_failures=0)
    first.on_step_begin(iteration=0, trials=[trial])
    start(first, trial)
    trial.handle_error(ValueError("bad luck"))
    assert trial.should_recover() is False
    first.on_experiment_end(trials=[trial])
    assert replay(url, "reset")[trial.trial_id].status is Status.ERROR

    # Tuner.restore(resume_errored=True) brings the trial back PENDING, failures kept.
    second = pickle.loads(pickle.dumps(first))
    second.setup()
    resumed = make_trial(tmp_path, "reset", like=trial, max_failures=0)
    resumed.run_metadata.num_failures = 1
    try:
        second.on_step_begin(iteration=0, trials=[resumed])
        start(second, resumed)
        second.on_trial_complete(iteration=1, trials=[resumed], trial=resumed)
    finally:
        second.on_experiment_end(trials=[resumed])
    (state,) = replay(url, "reset").values()
    assert (state.status, state.failures) == (Status.TERMINATED, 1)
    types = [e.type_name for e in stored_events(url, "reset", trial.trial_id)]
    assert types[-3:] == ["TrialReset", "TrialStarted", "TrialCompleted"]


def test_the_run_summary_warns_and_names_the_file_of_events_not_written(
    ray_cluster: None, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import json
    import logging

    from statemachine.domain.events import RestoreSucceeded
    from statemachine.tune import EventLogCallback

    callback = EventLogCallback(url=f"sqlite:///{tmp_path / 'log.db'}")
    callback.setup()
    trial = make_trial(tmp_path, "summary")
    callback.on_step_begin(iteration=0, trials=[])
    callback.on_step_begin(iteration=1, trials=[trial])  # Tune added it: tracked
    start(callback, trial)
    callback._record(trial, RestoreSucceeded())  # RUNNING: the fold refuses it
    with caplog.at_level(logging.INFO, logger="statemachine"):
        callback.on_experiment_end(trials=[trial])
    (line,) = [r for r in caplog.records if "were not written" in r.getMessage()]
    assert line.levelno == logging.WARNING
    (saved,) = Path(trial.storage.experiment_fs_path).glob("statemachine-unwritten-*.jsonl")
    assert str(saved) in line.getMessage()
    rows = [json.loads(x) for x in saved.read_text().splitlines()]
    assert [r["type"] for r in rows] == ["RestoreSucceeded"]
    assert rows[0]["reason"].startswith("refused by the state machine")
    assert not [r for r in caplog.records if "event log summary" in r.getMessage()]


def test_a_trial_pointed_at_its_old_folder_keeps_it_when_ray_starts_it(
    ray_cluster: None, tmp_path: Path
) -> None:
    """The Ray surface's accesses for a trial Ray's search algorithm creates again after a
    restore (issue 27), on the installed Ray: the experiment folder's entries are listed,
    ``point_to_folder`` makes ``Trial.init_local_path`` (called as its actor starts) keep the
    old folder, ``None`` lets Ray name a new one as before; ``TuneController.add_trial``
    (wrapped by ``install_add``) takes the trial alone."""
    import inspect

    from ray.train._internal.storage import StorageContext
    from ray.tune.execution.tune_controller import TuneController
    from ray.tune.experiment import Trial

    from statemachine.tune.ray_surface import trials as ray_trial

    storage = StorageContext(storage_path=str(tmp_path / "results"), experiment_dir_name="exp")
    old = Path(storage.experiment_fs_path, "__fake_abc_00002_2_x=3_2026-12-02_17-00-00")
    (old / "checkpoint_000001").mkdir(parents=True)
    (old / "checkpoint_000001" / "state.json").write_text("{}")
    Path(storage.experiment_fs_path, "experiment_state-x.json").write_text("{}")
    again = Trial("__fake", stub=True, storage=storage, trial_id="abc_00002")
    assert ray_trial.experiment_folder_names(again) == [old.name]  # folders only
    ray_trial.point_to_folder(again, old.name)
    again.init_local_path()
    assert ray_trial.trial_path(again) == old.as_posix()
    assert ray_trial.folder_files(again, (old / "checkpoint_000001").as_posix()) == 1
    assert ray_trial.trial_folder_names(again) == ["checkpoint_000001"]
    fresh = Trial("__fake", stub=True, storage=storage, trial_id="abc_00002")
    # Not started and not pointed anywhere: no folder yet, nothing in it (Ray's own
    # ``trial_fs_path`` raises here; a TuneController built directly hands such trials over).
    assert (ray_trial.has_folder_name(fresh), ray_trial.trial_folder_names(fresh)) == (False, [])
    ray_trial.point_to_folder(fresh, old.name)
    ray_trial.point_to_folder(fresh, None)
    fresh.init_local_path()
    assert Path(ray_trial.trial_path(fresh)).name not in ("None", old.name)
    assert list(inspect.signature(TuneController.add_trial).parameters) == ["self", "trial"]


def test_the_users_resume_options_and_the_error_files_ray_wrote_are_read(
    ray_cluster: None, tmp_path: Path
) -> None:
    """The Ray surface's reads for a trial Ray creates again after a restore (issue 27), on
    the installed Ray: ``resume_types`` of the ``ResumeConfig`` that ``Tuner.restore``'s
    options build (what ``_requeue_restored_trials`` is called with), and
    ``local_error_files``, the ``error.txt``/``error.pkl`` Ray's ``handle_error`` wrote."""
    import inspect

    from ray.exceptions import RayTaskError
    from ray.tune import ResumeConfig
    from ray.tune.execution.tune_controller import TuneController

    from statemachine.tune.ray_surface import trials as ray_trial
    from statemachine.tune.ray_surface.requeue import RESUME_DEFAULTS, resume_types

    assert resume_types(ResumeConfig()) == RESUME_DEFAULTS
    kind = ResumeConfig.ResumeType
    assert resume_types(ResumeConfig(unfinished=kind.RESTART, errored=kind.RESUME)) == {
        "finished": "skip", "unfinished": "restart", "errored": "resume"}
    assert resume_types(ResumeConfig(errored=kind.RESTART))["errored"] == "restart"
    assert list(inspect.signature(TuneController._requeue_restored_trials).parameters) == [
        "self", "trials", "resume_config"]
    trial = make_trial(tmp_path, "errors", max_failures=0)
    assert ray_trial.local_error_files(trial) == {}
    try:
        raise ValueError("bad luck")
    except ValueError as exc:
        error = RayTaskError("train", "Traceback: bad luck", exc)
    trial.handle_error(error)
    files = ray_trial.local_error_files(trial)
    assert sorted(files) == ["error.pkl", "error.txt"]
    assert b"bad luck" in files["error.txt"]
    assert "bad luck" in str(pickle.loads(files["error.pkl"]))


def test_an_ended_trial_whose_folder_name_drops_its_id_is_found_by_its_last_result(
    ray_cluster: None, tmp_path: Path
) -> None:
    """A trial Ray creates again after a restore, that ended without a logged checkpoint in a
    folder named by a ``trial_dirname_creator`` that drops its id: its folder is the one whose
    last result (written by the callback as it ended) names its id; read through the Ray
    surface's ``read_experiment_file`` on the installed Ray. A trial still running is not
    looked up that way (it wrote no last result)."""
    import json

    from ray.train._internal.storage import StorageContext
    from ray.tune.experiment import Trial

    from statemachine.domain.events import TrialAdded, TrialCompleted, TrialStarted
    from statemachine.domain.machine import fold
    from statemachine.tune.resume_from_log import LAST_RESULT
    from statemachine.tune.resume_regenerated import old_folder

    storage = StorageContext(storage_path=str(tmp_path / "results"), experiment_dir_name="exp")
    experiment = Path(storage.experiment_fs_path)
    for name, owner in (("x=1", "abc_00000"), ("x=2", "abc_00001"), ("x=3", None)):
        (experiment / name).mkdir(parents=True)
        if owner is not None:
            (experiment / name / LAST_RESULT).write_text(json.dumps(
                {"trial_id": owner, "training_iteration": 5}))
    again = Trial("__fake", stub=True, storage=storage, trial_id="abc_00001")
    ended, _ = fold("abc_00001", [TrialAdded(), TrialStarted(), TrialCompleted()])
    running, _ = fold("abc_00001", [TrialAdded(), TrialStarted()])
    assert old_folder(again, ended) == "x=2"
    assert old_folder(again, running) is None
    other = Trial("__fake", stub=True, storage=storage, trial_id="abc_00002")
    assert old_folder(other, fold("abc_00002", [TrialAdded(), TrialStarted(),
                                                TrialCompleted()])[0]) is None
