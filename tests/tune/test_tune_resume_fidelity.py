"""Resume fidelity (issue 15): a moved or renamed experiment, a lost log, reused trial ids, a
``TuneController`` built directly, experiments that end early.

Each scenario runs real Ray (2 CPUs, module fixture) twice where it matters, without and with
:class:`~statemachine.tune.EventLogCallback`, and counts the attempts the trainable made: the
callback must never grant a retry Ray had already spent.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from tune_trainables import always_fails

from statemachine.domain.events import CountersAdopted, ExperimentRenamed
from tests.tune.tunekit import assert_log_matches_ray, ray_trials, stored_events

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def attempts(ctl: Path) -> int:
    return len(list(ctl.glob("attempt-*")))


def first_run(tmp_path: Path, name: str, ctl: Path, callbacks: list[Any]) -> Any:
    """One trial that always fails, ``max_failures=1``: it ends ERROR after 2 attempts."""
    from ray import tune

    from statemachine.tune import FailureConfig, RunConfig

    tuner = tune.Tuner(
        always_fails, param_space={"ctl": str(ctl)},
        run_config=RunConfig(name=name, storage_path=str(tmp_path / "results"),
                             callbacks=callbacks, verbose=0,
                             failure_config=FailureConfig(max_failures=1)),
    )
    return tuner.fit()


def move(tmp_path: Path, old: str, new: str) -> Path:
    """Move the results folder and rename the experiment's folder; the new experiment path."""
    moved = tmp_path / "moved"
    shutil.move(str(tmp_path / "results"), str(moved))
    (moved / old).rename(moved / new)
    return moved / new


def restore_errored(path: Path) -> Any:
    from ray import tune

    return tune.Tuner.restore(str(path), trainable=always_fails, resume_errored=True).fit()


def run_moved(tmp_path: Path, callbacks: list[Any], *, lose_log: bool = False) -> tuple[
        int, int, Any, Path]:
    """Attempts before and after the restore of the moved and renamed experiment."""
    ctl = tmp_path / "ctl"
    ctl.mkdir()
    grid = first_run(tmp_path, "exp-a", ctl, callbacks)
    assert [t.status for t in grid._experiment_analysis.trials] == ["ERROR"]
    before = attempts(ctl)
    path = move(tmp_path, "exp-a", "exp-b")
    if lose_log:
        (path / "statemachine.db").unlink()
    grid = restore_errored(path)
    return before, attempts(ctl) - before, grid, path


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory, ray_cluster: None) -> tuple[int, int]:
    """Attempts without the callback (Ray alone): before and after the restore."""
    before, after, _, _ = run_moved(tmp_path_factory.mktemp("plain"), [])
    return before, after


def test_a_moved_and_renamed_experiment_gets_no_extra_retry(
    ray_cluster: None, plain: tuple[int, int], tmp_path: Path
) -> None:
    from statemachine.log import EventStore, verify
    from statemachine.tune import EventLogCallback

    assert plain == (2, 1)
    before, after, grid, path = run_moved(tmp_path, [EventLogCallback()])
    assert (before, after) == plain
    url = f"sqlite:///{path / 'statemachine.db'}"
    states = assert_log_matches_ray(url, "exp-b", grid)
    (trial_id,) = states
    events = [e.event for e in stored_events(url, "exp-b", trial_id)]
    renames = [e for e in events if isinstance(e, ExperimentRenamed)]
    assert [(r.old_name, r.new_name) for r in renames] == [("exp-a", "exp-b")]
    assert states[trial_id].failures == 3
    with EventStore.open(url, create=False) as store:
        assert [i.name for i in store.list_experiments()] == ["exp-b"]
        assert verify(store, "exp-b").ok
    assert_cli_shows_the_rename(url, trial_id, str(tmp_path / "results" / "exp-a"))


def assert_cli_shows_the_rename(url: str, trial_id: str, old_path: str) -> None:
    """``experiments`` lists the old name (and folder); ``explain`` says the trial moved."""
    from click.testing import CliRunner

    from statemachine.cli import cli

    def run(*args: str) -> str:
        result = CliRunner().invoke(cli, ["--db", url, *args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.stdout

    (row,) = json.loads(run("experiments", "--json"))
    assert [(r["name"], r["storage_path"]) for r in row["renamed_from"]] == [
        ("exp-a", old_path)]
    assert "exp-b (was exp-a)" in run("experiments")
    steps = json.loads(run("explain", "exp-b", trial_id, "--json"))["steps"]
    assert any("renamed from 'exp-a'" in step["text"] for step in steps)


def test_a_lost_log_keeps_rays_failure_count(
    ray_cluster: None, plain: tuple[int, int], tmp_path: Path
) -> None:
    """The log is gone (a lost copy on storage, a deleted file): Ray's counters are adopted."""
    from statemachine.tune import EventLogCallback

    before, after, grid, path = run_moved(tmp_path, [EventLogCallback()], lose_log=True)
    assert (before, after) == plain
    url = f"sqlite:///{path / 'statemachine.db'}"
    states = assert_log_matches_ray(url, "exp-b", grid)
    (trial_id,) = states
    adopted = [e.event for e in stored_events(url, "exp-b", trial_id)
               if isinstance(e.event, CountersAdopted)]
    assert [(a.failures, a.source) for a in adopted] == [(2, "Ray's restored experiment state")]


def test_a_moved_and_renamed_experiment_in_postgresql(
    ray_cluster: None, plain: tuple[int, int], tmp_path: Path, pg_url: str
) -> None:
    from statemachine.log import EventStore, verify
    from statemachine.tune import EventLogCallback

    before, after, grid, _ = run_moved(tmp_path, [EventLogCallback(url=pg_url)])
    assert (before, after) == plain
    states = assert_log_matches_ray(pg_url, "exp-b", grid)
    assert [s.failures for s in states.values()] == [3]
    with EventStore.open(pg_url, create=False) as store:
        assert [i.name for i in store.list_experiments()] == ["exp-b"]
        assert verify(store, "exp-b").ok
    assert ray_trials(grid)


# ---------------------------------------------------------------- a TuneController built directly


def direct_run(tmp_path: Path, ctl: Path, callback: Any, trials: list[tuple[str, str, int]],
               *, fail_fast: bool | str = False) -> list[Any]:
    """As Ray's own tests do: a ``TuneController`` stepped by hand (its callbacks' ``setup()``
    is never called); ``trials``: (trial id, registered trainable, max_failures)."""
    from ray.train._internal.storage import StorageContext
    from ray.tune.execution.tune_controller import TuneController
    from ray.tune.experiment import Trial

    storage = StorageContext(storage_path=str(tmp_path / "results"),
                             experiment_dir_name="direct")
    storage.storage_filesystem.create_dir(storage.experiment_fs_path)
    runner = TuneController(callbacks=[callback], storage=storage, fail_fast=fail_fast)
    made = [Trial(name, config={"ctl": str(ctl), "iters": 2}, trial_id=trial_id,
                  storage=storage, max_failures=max_failures,
                  stopping_criterion={"training_iteration": 2})
            for trial_id, name, max_failures in trials]
    for trial in made:
        runner.add_trial(trial)
    try:
        while not runner.is_finished():
            runner.step()
    finally:
        runner.cleanup()
    return made


@pytest.fixture
def registered(ray_cluster: None) -> None:
    from ray import tune
    from tune_trainables import Flaky

    tune.register_trainable("sm_always_fails", always_fails)
    tune.register_trainable("sm_flaky", Flaky)


def log_of(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'results' / 'direct' / 'statemachine.db'}"


def assert_log_is_ray(url: str, trials: list[Any]) -> dict[str, Any]:
    from tests.tune.tunekit import replay

    states = replay(url, "direct")
    assert {t.trial_id: (s.status.value, s.failures) for t in trials
            for s in [states[t.trial_id]]} == {
        t.trial_id: (t.status, t.run_metadata.num_failures) for t in trials}
    return states


def test_a_tune_controller_built_directly_records_every_failure(
    registered: None, tmp_path: Path
) -> None:
    from statemachine.log import EventStore, verify
    from statemachine.tune import EventLogCallback

    ctl = tmp_path / "ctl"
    ctl.mkdir()
    callback = EventLogCallback()
    trials = direct_run(tmp_path, ctl, callback, [("t1", "sm_always_fails", 2)])
    assert callback.summary()["hook_errors"] == 0
    assert callback.events_rejected == 0
    states = assert_log_is_ray(log_of(tmp_path), trials)
    assert (states["t1"].status.value, states["t1"].failures) == ("ERROR", 3)
    failed = [e for e in stored_events(log_of(tmp_path), "direct", "t1")
              if e.type_name == "TrialFailed"]
    assert len(failed) == attempts(ctl) == 3
    with EventStore.open(log_of(tmp_path), create=False) as store:
        assert verify(store, "direct").ok


def test_a_reused_trial_id_is_a_new_incarnation(registered: None, tmp_path: Path) -> None:
    """Runs that reuse fixed ids in one folder: the new t1 is not the old, ended one."""
    from statemachine.domain.events import TrialRecreated
    from statemachine.log import EventStore, verify
    from statemachine.tune import EventLogCallback

    ctl = tmp_path / "ctl"
    ctl.mkdir()
    callback = EventLogCallback()  # one callback for both controllers, as a test would
    direct_run(tmp_path, ctl, callback, [("t1", "sm_always_fails", 0)])
    trials = direct_run(tmp_path, ctl, callback, [("t1", "sm_flaky", 0)])
    assert (callback.events_rejected, callback.summary()["hook_errors"]) == (0, 0)
    states = assert_log_is_ray(log_of(tmp_path), trials)
    assert (states["t1"].status.value, states["t1"].failures, states["t1"].incarnation) == (
        "TERMINATED", 0, 1)
    recreated = [e.event for e in stored_events(log_of(tmp_path), "direct", "t1")
                 if isinstance(e.event, TrialRecreated)]
    assert len(recreated) == 1
    with EventStore.open(log_of(tmp_path), create=False) as store:
        assert verify(store, "direct").ok
