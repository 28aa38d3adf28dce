"""Function trainables with real Ray Tune: a checkpoint load that fails in the user's code.

One run per way, each with two trials (``ray.init(num_cpus=2)``): trial ``a`` checkpoints,
fails once in training (``max_failures=1``), restarts from its checkpoint, and then its own
checkpoint load fails twice and works the third time (``TUNE_RESTORE_RETRY_NUM=2``); trial
``b`` restores fine and then hits a genuine training bug. ``restoring()`` and
``RetryPolicy(restore_phase="until_first_report")`` make ``a`` end TERMINATED with 1 failure
and 2 restore failures; the default policy, and plain Ray without the callback, end it ERROR
with 2 failures. ``b`` ends ERROR with 2 failures in every way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tune_trainables import FlakyMarked, function_trainable, load_attempts, restore_attempts

from statemachine.domain.policy import RetryPolicy
from tests.tune.tunekit import assert_log_matches_ray, stored_events

pytestmark = [pytest.mark.ray, pytest.mark.slow]

VARIANTS = [{"tag": "a", "fail_loads": 2}, {"tag": "b", "bug_after_restore_at": 3}]


def fit(tmp_path: Path, name: str, ctl: Path, callbacks: list[Any], mark: bool) -> Any:
    from ray import tune

    from statemachine.tune import FailureConfig, RunConfig

    tuner = tune.Tuner(
        function_trainable,
        param_space={"ctl": str(ctl), "iters": 4, "fail_at": 2, "mark": mark,
                     "variant": tune.grid_search(VARIANTS)},
        run_config=RunConfig(name=name, storage_path=str(tmp_path / "results"),
                             callbacks=callbacks, verbose=0,
                             failure_config=FailureConfig(max_failures=1)),
    )
    return tuner.fit()


def by_tag(grid: Any) -> dict[str, Any]:
    return {t.config["variant"]["tag"]: t for t in grid._experiment_analysis.trials}


@pytest.fixture
def ctl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TUNE_RESTORE_RETRY_NUM", "2")
    folder = tmp_path / "ctl"
    folder.mkdir()
    return folder


def _failures(url: str, name: str, trial: Any) -> list[tuple[str, str, str]]:
    return [(e.event.error.kind, e.event.error.cause_type, e.decision)
            for e in stored_events(url, name, trial.trial_id) if e.type_name == "TrialFailed"]


@pytest.mark.parametrize("way", ["restoring", "until_first_report", "default"])
def test_a_failed_checkpoint_load_in_user_code(
    ray_cluster: None, tmp_path: Path, ctl: Path, way: str
) -> None:
    from statemachine.tune import EventLogCallback

    policy = (RetryPolicy.from_env(max_failures=1, restore_phase="until_first_report")
              if way == "until_first_report" else None)
    callback = EventLogCallback(policy=policy)
    grid = fit(tmp_path, way, ctl, [callback], mark=way == "restoring")
    url = f"sqlite:///{tmp_path / 'results' / way / 'statemachine.db'}"
    states = assert_log_matches_ray(url, way, grid)
    trials = by_tag(grid)
    a, b = trials["a"], trials["b"]
    if way == "default":  # Ray's own rules: the failed load is a training failure
        assert (a.status, a.num_failures) == ("ERROR", 2)
        assert states[a.trial_id].total_restore_failures == 0
        assert load_attempts(ctl, "a") == 1
        assert _failures(url, way, a)[-1] == ("TrainingError", "builtins.OSError", "GIVE_UP")
    else:
        assert (a.status, a.num_failures) == ("TERMINATED", 1)
        assert states[a.trial_id].total_restore_failures == 2
        assert load_attempts(ctl, "a") == 3
        assert _failures(url, way, a) == [
            ("TrainingError", "builtins.ValueError", "RECOVER"),
            ("RestoreError", "builtins.OSError", "RETRY_RESTORE"),
            ("RestoreError", "builtins.OSError", "RETRY_RESTORE"),
        ]
        failed = [e.event.error for e in stored_events(url, way, a.trial_id)
                  if e.type_name == "TrialFailed"]
        assert "checkpoint load attempt 1 failed" in failed[1].message
        assert "_load_state" in failed[1].traceback  # the worker's own traceback text
    # A genuine training bug after a restore that worked stays a training failure.
    assert (b.status, b.num_failures) == ("ERROR", 2)
    assert states[b.trial_id].total_restore_failures == 0
    assert _failures(url, way, b)[-1] == ("TrainingError", "builtins.KeyError", "GIVE_UP")
    # One FirstResult per attempt that reported, not one per result.
    kinds = [e.type_name for e in stored_events(url, way, a.trial_id)]
    assert kinds.count("FirstResult") == kinds.count("TrialStarted") - (
        1 if way == "default" else 2)
    assert callback.events_rejected == 0 and callback.hook_errors == 0


def test_plain_ray_counts_the_failed_load_as_a_failure(
    ray_cluster: None, tmp_path: Path, ctl: Path
) -> None:
    """What Ray itself does, without the callback (the default policy must match it)."""
    grid = fit(tmp_path, "plain", ctl, [], mark=False)
    trials = by_tag(grid)
    assert (trials["a"].status, trials["a"].num_failures) == ("ERROR", 2)
    assert (trials["b"].status, trials["b"].num_failures) == ("ERROR", 2)
    assert load_attempts(ctl, "a") == 1


def test_restoring_inside_a_class_trainable_changes_nothing(
    ray_cluster: None, tmp_path: Path, ctl: Path
) -> None:
    """The same outcome as the unmarked class trainable (test_tune_runs: 1 failure, 2
    restore retries): Ray already types that restore."""
    from ray import tune

    from statemachine.tune import CheckpointConfig, EventLogCallback, FailureConfig, RunConfig

    (ctl / "fail-restores").write_text("2")
    grid = tune.Tuner(FlakyMarked, param_space={"ctl": str(ctl), "iters": 4, "fail_at": 2},
                      run_config=RunConfig(
                          name="marked", storage_path=str(tmp_path / "results"), verbose=0,
                          callbacks=[EventLogCallback()],
                          failure_config=FailureConfig(max_failures=1),
                          checkpoint_config=CheckpointConfig(checkpoint_frequency=1))).fit()
    url = f"sqlite:///{tmp_path / 'results' / 'marked' / 'statemachine.db'}"
    states = assert_log_matches_ray(url, "marked", grid)
    (trial,) = grid._experiment_analysis.trials
    assert (trial.status, trial.num_failures) == ("TERMINATED", 1)
    assert states[trial.trial_id].total_restore_failures == 2
    assert restore_attempts(ctl) == 3
    assert _failures(url, "marked", trial) == [
        ("TrainingError", "builtins.ValueError", "RECOVER"),
        ("RestoreError", "builtins.OSError", "RETRY_RESTORE"),
        ("RestoreError", "builtins.OSError", "RETRY_RESTORE"),
    ]
