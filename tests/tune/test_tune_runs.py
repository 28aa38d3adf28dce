"""The callback with real Ray Tune runs: typed failures, budgets, policy extras, replay = Ray.

Every run uses ``ray.init(num_cpus=2)`` (module fixture), a small class trainable steered by
files in a control folder, and the default store (``statemachine.db`` in the experiment
folder). After each run the log is replayed from scratch and must give exactly the statuses
and failure counts Ray reports in its ``ResultGrid``.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import pickle
from pathlib import Path
from typing import Any

import pytest
from tune_trainables import Flaky, PauseOnce

from statemachine.domain.policy import ExhaustionAction, RetryPolicy
from tests.tune.tunekit import assert_log_matches_ray, ray_trials, stored_events

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def fit(tmp_path: Path, name: str, config: dict[str, Any], callback: Any, *,
        max_failures: int, grid: list[dict[str, Any]] | None = None,
        scheduler: Any = None) -> Any:
    """Run ``Flaky`` with ``config`` (or one trial per ``grid`` entry) and return the grid."""
    from ray import tune

    from statemachine.tune import CheckpointConfig, FailureConfig, RunConfig

    param_space = dict(config)
    if grid is not None:
        param_space["variant"] = tune.grid_search(grid)
    tuner = tune.Tuner(
        Flaky,
        param_space=param_space,
        tune_config=tune.TuneConfig(scheduler=scheduler),
        run_config=RunConfig(
            name=name,
            storage_path=str(tmp_path / "results"),
            callbacks=[callback],
            verbose=0,
            failure_config=FailureConfig(max_failures=max_failures),
            checkpoint_config=CheckpointConfig(checkpoint_frequency=1),
        ),
    )
    return tuner.fit()


def db_url(tmp_path: Path, name: str) -> str:
    """The default store of experiment ``name``: a SQLite file in its folder."""
    path = tmp_path / "results" / name / "statemachine.db"
    assert path.exists(), f"no event log at {path}"
    return f"sqlite:///{path}"


def failures(events: list[Any]) -> list[Any]:
    """The ``TrialFailed`` rows of a trial."""
    return [e for e in events if e.type_name == "TrialFailed"]


def only_trial(grid: Any) -> Any:
    (trial,) = grid._experiment_analysis.trials
    return trial


@pytest.fixture
def ctl(tmp_path: Path) -> Path:
    folder = tmp_path / "ctl"
    folder.mkdir()
    return folder


def test_restore_retries_do_not_count_and_are_logged_typed(
    ray_cluster: None, tmp_path: Path, ctl: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from statemachine.tune import EventLogCallback

    monkeypatch.setenv("TUNE_RESTORE_RETRY_NUM", "2")
    (ctl / "fail-restores").write_text("2")
    callback = EventLogCallback()
    grid = fit(tmp_path, "retry", {"ctl": str(ctl), "iters": 4, "fail_at": 2}, callback,
               max_failures=1)

    trial = only_trial(grid)
    assert (trial.status, trial.num_failures) == ("TERMINATED", 1)
    url = db_url(tmp_path, "retry")
    states = assert_log_matches_ray(url, "retry", grid)
    assert states[trial.trial_id].total_restore_failures == 2

    failed = failures(stored_events(url, "retry", trial.trial_id))
    assert [(e.event.error.kind, e.decision) for e in failed] == [
        ("TrainingError", "RECOVER"),
        ("RestoreError", "RETRY_RESTORE"),
        ("RestoreError", "RETRY_RESTORE"),
    ]
    assert failed[0].event.error.cause_type == "builtins.ValueError"
    for attempt, row in enumerate(failed[1:], start=1):
        assert row.event.error.cause_type == "builtins.OSError"
        assert f"restore attempt {attempt} failed" in row.event.error.message
        assert "load_checkpoint" in row.event.error.traceback

    text = Path(trial.path, "error.txt").read_text()
    assert "Failure # 1 (occurred at" in text
    assert "Restore failure # 1 (retry 1 of 2)" in text
    assert "Restore failure # 2 (retry 2 of 2)" in text
    assert callback.events_unwritten == 0 and callback.events_rejected == 0
    assert callback.events_recorded > 0 and callback.hook_errors == 0


def test_training_errors_and_actor_deaths_are_typed(
    ray_cluster: None, tmp_path: Path, ctl: Path
) -> None:
    from statemachine.tune import EventLogCallback

    grid = fit(
        tmp_path, "typed", {"ctl": str(ctl), "iters": 3}, EventLogCallback(), max_failures=1,
        grid=[{"tag": "raise", "fail_at": 2}, {"tag": "die", "die_at": 2}],
    )
    url = db_url(tmp_path, "typed")
    assert_log_matches_ray(url, "typed", grid)
    assert set(ray_trials(grid).values()) == {("TERMINATED", 1)}
    kinds = {}
    for trial in grid._experiment_analysis.trials:
        events = stored_events(url, "typed", trial.trial_id)
        (row,) = failures(events)
        kinds[trial.config["variant"]["tag"]] = row.event.error
        assert row.decision == "RECOVER"
        assert "RestoreSucceeded" in [e.type_name for e in events]
    assert kinds["raise"].kind == "TrainingError"
    assert kinds["raise"].cause_type == "builtins.ValueError"
    assert kinds["die"].kind == "ActorError"
    assert kinds["die"].preempted is False
    assert kinds["die"].cause_type.startswith("ray.exceptions.")


def test_restart_from_scratch_deletes_old_checkpoints_and_finishes(
    ray_cluster: None, tmp_path: Path, ctl: Path
) -> None:
    from statemachine.tune import EventLogCallback

    (ctl / "fail-restores").write_text("-1")
    policy = RetryPolicy(max_failures=3, restore_retry_num=1,
                         on_restore_exhausted=ExhaustionAction.RESTART_FROM_SCRATCH,
                         delete_discarded_checkpoints=True)
    grid = fit(tmp_path, "scratch", {"ctl": str(ctl), "iters": 4, "fail_at": 3},
               EventLogCallback(policy=policy), max_failures=3)

    trial = only_trial(grid)
    assert (trial.status, trial.num_failures) == ("TERMINATED", 2)
    url = db_url(tmp_path, "scratch")
    assert_log_matches_ray(url, "scratch", grid)
    events = stored_events(url, "scratch", trial.trial_id)
    assert [e.decision for e in failures(events)] == [
        "RECOVER", "RETRY_RESTORE", "RESTART_FROM_SCRATCH"]
    (discarded,) = [e.event for e in events if e.type_name == "CheckpointsDiscarded"]
    assert discarded.deleted is True
    assert [Path(p).name for p in discarded.checkpoints] == [
        "checkpoint_000000", "checkpoint_000001"]
    for path in discarded.checkpoints:
        assert not Path(path).exists(), f"{path} was not deleted"
    # The restarted trial trained from scratch (4 more iterations) into new checkpoints.
    result = grid[0]
    assert result.metrics["training_iteration"] == 4
    assert result.checkpoint is not None and Path(result.checkpoint.path).exists()
    assert result.checkpoint.path not in discarded.checkpoints
    starts = [e.event.restore_from for e in events if e.type_name == "TrialStarted"]
    assert starts[-1] is None


def test_previous_checkpoint_falls_back_and_finishes(
    ray_cluster: None, tmp_path: Path, ctl: Path
) -> None:
    from statemachine.tune import EventLogCallback

    (ctl / "bad-checkpoint").write_text("checkpoint_000001")
    policy = RetryPolicy(max_failures=3, restore_retry_num=0,
                         on_restore_exhausted=ExhaustionAction.PREVIOUS_CHECKPOINT)
    grid = fit(tmp_path, "previous", {"ctl": str(ctl), "iters": 4, "fail_at": 3},
               EventLogCallback(policy=policy), max_failures=3)

    trial = only_trial(grid)
    assert (trial.status, trial.num_failures) == ("TERMINATED", 2)
    url = db_url(tmp_path, "previous")
    assert_log_matches_ray(url, "previous", grid)
    events = stored_events(url, "previous", trial.trial_id)
    assert [e.decision for e in failures(events)] == ["RECOVER", "PREVIOUS_CHECKPOINT"]
    starts = [e.event.restore_from for e in events if e.type_name == "TrialStarted"]
    assert [Path(p).name if p else None for p in starts] == [
        None, "checkpoint_000001", "checkpoint_000000"]
    assert grid[0].metrics["training_iteration"] == 4


def test_fatal_exception_type_gives_up_at_once(
    ray_cluster: None, tmp_path: Path, ctl: Path
) -> None:
    from statemachine.tune import EventLogCallback

    policy = RetryPolicy(max_failures=3, fatal_exception_types=("KeyError",))
    grid = fit(tmp_path, "fatal",
               {"ctl": str(ctl), "iters": 3, "fail_at": 1, "raise_type": "KeyError"},
               EventLogCallback(policy=policy), max_failures=3)

    trial = only_trial(grid)
    # Ray alone would have retried 3 times (max_failures=3).
    assert (trial.status, trial.num_failures) == ("ERROR", 1)
    url = db_url(tmp_path, "fatal")
    assert_log_matches_ray(url, "fatal", grid)
    (row,) = failures(stored_events(url, "fatal", trial.trial_id))
    assert (row.event.error.kind, row.event.error.cause_type, row.decision) == (
        "AbortError", "builtins.KeyError", "GIVE_UP")
    assert "[AbortError; decision GIVE_UP]" in Path(trial.path, "error.txt").read_text()


def test_unreachable_store_is_reported_counted_and_saved(
    ray_cluster: None, tmp_path: Path, ctl: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from statemachine.tune import EventLogCallback

    callback = EventLogCallback(url="postgresql+psycopg://postgres@127.0.0.1:9/nothing")
    with caplog.at_level(logging.WARNING, logger="statemachine"):
        grid = fit(tmp_path, "nostore", {"ctl": str(ctl), "iters": 2}, callback,
                   max_failures=0)

    assert ray_trials(grid) == {only_trial(grid).trial_id: ("TERMINATED", 0)}
    assert callback.events_recorded == 0
    assert callback.write_failures > 0
    assert callback.events_unwritten >= 4  # added, started, checkpoints, completed
    errors = [r for r in caplog.records
              if r.levelno == logging.ERROR and "could not be written" in r.getMessage()]
    assert errors, "the unwritten events were not reported with logger.error"
    (saved,) = (tmp_path / "results" / "nostore").glob("statemachine-unwritten-*.jsonl")
    lines = [json.loads(line) for line in saved.read_text().splitlines()]
    assert len(lines) == callback.events_unwritten
    types = [line["type"] for line in lines]
    assert types[0] == "TrialAdded" and types[-1] == "TrialCompleted"


def test_callback_pickles_without_its_log(
    ray_cluster: None, tmp_path: Path, ctl: Path
) -> None:
    from statemachine.tune import EventLogCallback

    policy = RetryPolicy(max_failures=2)
    callback = EventLogCallback(url=None, policy=policy)
    fit(tmp_path, "pickled", {"ctl": str(ctl), "iters": 1}, callback, max_failures=2)
    assert callback.events_recorded > 0
    clone = pickle.loads(pickle.dumps(callback))
    assert clone.policy == policy and clone.url is None
    assert clone.events_recorded == 0 and clone._recorder is None


def test_pause_and_resume_are_recorded(ray_cluster: None, tmp_path: Path, ctl: Path) -> None:
    from statemachine.tune import EventLogCallback

    callback = EventLogCallback()
    grid = fit(tmp_path, "paused", {"ctl": str(ctl), "iters": 3}, callback, max_failures=0,
               scheduler=PauseOnce(at=2))
    trial = only_trial(grid)
    assert (trial.status, trial.num_failures) == ("TERMINATED", 0)
    url = db_url(tmp_path, "paused")
    assert_log_matches_ray(url, "paused", grid)
    types = [e.type_name for e in stored_events(url, "paused", trial.trial_id)]
    paused = types.index("TrialPaused")
    assert types[paused + 1: paused + 4] == ["TrialResumed", "TrialStarted", "RestoreSucceeded"]
    assert types[-1] == "TrialCompleted" and "TrialStopped" not in types
    assert callback.events_rejected == 0


@pytest.mark.postgres
def test_store_url_from_the_environment_postgres(
    ray_cluster: None, tmp_path: Path, ctl: Path, monkeypatch: pytest.MonkeyPatch, pg_url: str
) -> None:
    import uuid

    from statemachine.tune import EventLogCallback

    url = pg_url  # a schema of its own: the shared database's public schema is never used
    monkeypatch.setenv("STATEMACHINE_DB_URL", url)
    monkeypatch.setenv("TUNE_RESTORE_RETRY_NUM", "1")
    (ctl / "fail-restores").write_text("1")
    name = f"pg-{uuid.uuid4().hex[:8]}"
    callback = EventLogCallback()
    grid = fit(tmp_path, name, {"ctl": str(ctl), "iters": 3, "fail_at": 2}, callback,
               max_failures=1)
    assert callback.store_url == url
    assert not (tmp_path / "results" / name / "statemachine.db").exists()
    assert ray_trials(grid) == {only_trial(grid).trial_id: ("TERMINATED", 1)}
    states = assert_log_matches_ray(url, name, grid)
    assert [s.total_restore_failures for s in states.values()] == [1]


@pytest.mark.postgres
def test_a_store_failure_mid_run_is_retried(
    ray_cluster: None, tmp_path: Path, ctl: Path, pg_url: str
) -> None:
    import uuid

    import psycopg
    from ray import tune
    from sqlalchemy.engine import make_url

    from statemachine.tune import CheckpointConfig, EventLogCallback, RunConfig

    # The store's connections carry an application name of their own, so only they are
    # dropped (other work may share the server).
    app = f"sm-drop-{uuid.uuid4().hex[:8]}"
    url = make_url(pg_url).update_query_dict({"application_name": app}).render_as_string(
        hide_password=False)

    class DropStoreConnections(tune.Callback):
        """At the first checkpoint, kill every server connection of the store."""

        dropped = 0

        def on_checkpoint(self, iteration: int, trials: list, trial: Any, checkpoint: Any,
                          **info: Any) -> None:
            if self.dropped:
                return
            plain = make_url(pg_url).set(drivername="postgresql").render_as_string(
                hide_password=False)
            with psycopg.connect(plain, autocommit=True) as conn:
                (self.dropped,) = conn.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE application_name = %s AND pid <> pg_backend_pid()", (app,)
                ).fetchone()

    dropper, callback = DropStoreConnections(), EventLogCallback(url=url)
    name = f"pg-drop-{uuid.uuid4().hex[:8]}"
    grid = tune.Tuner(
        Flaky, param_space={"ctl": str(ctl), "iters": 3},
        run_config=RunConfig(
            name=name, storage_path=str(tmp_path / "results"), callbacks=[dropper, callback],
            verbose=0, checkpoint_config=CheckpointConfig(checkpoint_frequency=1)),
    ).fit()
    assert dropper.dropped >= 1, "no store connection was open to drop"
    assert callback.write_failures >= 1
    assert callback.events_unwritten == 0 and callback.events_rejected == 0
    states = assert_log_matches_ray(url, name, grid)
    (trial_id,) = states
    stored = stored_events(url, name, trial_id)
    assert [e.seq for e in stored] == list(range(1, len(stored) + 1))
    assert len(stored) == callback.events_recorded
    assert [e.type_name for e in stored].count("CheckpointSaved") == 3


def test_sessions_say_fresh_fit_or_restore(ray_cluster: None, tmp_path: Path, ctl: Path) -> None:
    """A second Tuner.fit() reusing the name is a fresh run, not a resume; Tuner.restore is."""
    from ray import tune

    from statemachine.cli import main
    from statemachine.log import EventStore
    from statemachine.tune import EventLogCallback

    config = {"ctl": str(ctl), "iters": 2, "fail_at": 1, "raise_type": "ValueError"}
    first = fit(tmp_path, "kinds", config, EventLogCallback(), max_failures=0)
    second = fit(tmp_path, "kinds", config, EventLogCallback(), max_failures=0)
    (trial,) = ray_trials(second)
    tune.Tuner.restore(str(tmp_path / "results" / "kinds"), trainable=Flaky,
                       resume_errored=True).fit()
    url = db_url(tmp_path, "kinds")
    with EventStore.open(url, create=False) as store:
        kinds = [(s.epoch, s.kind) for s in store.list_sessions("kinds")]
    assert kinds == [(1, "fresh"), (2, "fresh"), (3, "restore")]
    assert set(ray_trials(first)) != {trial}
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert main(["--db", url, "explain", trial, "--json"]) == 0
    explained = [(s["event"], s["text"]) for s in json.loads(out.getvalue())["steps"]]
    assert explained[0] == ("DriverStarted", "Epoch 2 is a fresh Tuner.fit() that reuses the "
                            "experiment's name (a new run, not a restore of epoch 1).")
    resumed = [text for event, text in explained if event == "DriverResumed"]
    assert len(resumed) == 1 and "epoch 3, a Tuner.restore, took over" in resumed[0]
