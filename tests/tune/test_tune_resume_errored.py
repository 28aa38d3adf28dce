"""``resume_errored`` after an aborted driver: the log agrees with Ray's counts (issue 27 b).

As Ray's ``test_tuner_restore.py::testParamSpaceOverwrite``: trials that fail at once, a
driver aborted by a callback's exception once two trials have ended (Ray's experiment state
is then older than some failures), ``Tuner.restore(resume_errored=True)``. Before, a trial
Ray had saved before its failure (PENDING, no failure) was taken for a new trial behind a
reused id (``TrialRecreated``, counters reset). Now: no restored trial is a new incarnation;
where Ray's saved state holds the failure, Ray's ``num_failures`` and the next decision are the
same with and without the callback; where it missed it, the callback hands Ray the true count
(plain Ray grants a retry already spent). With the callback the log always agrees with Ray.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.ray_support import running_ray
from tests.tune.tunekit import replay, stored_events, worker_pythonpath

pytestmark = [pytest.mark.ray]


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    with running_ray(worker_pythonpath()):
        yield


def saved_by_ray(experiment: Path) -> dict[str, tuple[str, int]]:
    """Each trial in Ray's newest experiment state: (status, num_failures)."""
    newest = sorted(experiment.glob("experiment_state-*.json"))[-1]
    rows = json.loads(newest.read_text())["trial_data"]
    return {json.loads(t)["trial_id"]: (json.loads(t)["status"], json.loads(m)["num_failures"])
            for t, m in rows}


def run(tmp: Path, with_callback: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    from ray import tune
    from ray.tune import Callback
    from resume_trainables import fails_while_marked

    from statemachine.tune import EventLogCallback, FailureConfig, RunConfig

    monkeypatch.setenv("TUNE_MAX_PENDING_TRIALS_PG", "1")  # trials made one at a time

    class AbortAfterTwoEnded(Callback):
        def on_step_begin(self, iteration: int, trials: list[Any], **info: Any) -> None:
            if sum(t.status in ("TERMINATED", "ERROR") for t in trials) >= 2:
                raise RuntimeError("abort the driver")

    ctl = tmp / "ctl"
    ctl.mkdir(parents=True)
    (ctl / "fail").touch()
    callbacks: list[Any] = [AbortAfterTwoEnded()]
    if with_callback:
        callbacks.append(EventLogCallback())
    tuner = tune.Tuner(fails_while_marked,
                       param_space={"ctl": str(ctl), "x": tune.grid_search([1, 2, 3])},
                       run_config=RunConfig(name="exp", storage_path=str(tmp / "results"),
                                            callbacks=callbacks, verbose=0,
                                            failure_config=FailureConfig(max_failures=1)))
    with pytest.raises(RuntimeError):
        tuner.fit()
    experiment = tmp / "results" / "exp"
    saved = saved_by_ray(experiment)
    # the restored run: each trial fails once more, then succeeds
    restored = tune.Tuner.restore(str(experiment), trainable=fails_while_marked,
                                  resume_errored=True)
    run_config = restored._local_tuner._run_config
    run_config.callbacks = [c for c in run_config.callbacks or []
                            if not isinstance(c, AbortAfterTwoEnded)]
    grid = restored.fit()
    trials = grid._experiment_analysis.trials
    return {"saved": saved,
            "final": {t.trial_id: (t.status, t.run_metadata.num_failures) for t in trials},
            "url": f"sqlite:///{experiment / 'statemachine.db'}"}


def test_resume_errored_keeps_rays_counts_and_the_log_agrees(
        ray_cluster: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ours = run(tmp_path / "with", True, monkeypatch)
    plain = run(tmp_path / "plain", False, monkeypatch)
    states = replay(ours["url"], "exp")
    recreated = [t for t in ours["saved"] for e in stored_events(ours["url"], "exp", t)
                 if e.type_name == "TrialRecreated"]
    assert recreated == []  # no trial Ray restored is taken for a new one
    # the trainable always fails: every trial that runs ends ERROR; one kept TERMINATED would
    # be a trial the aborted driver stopped (the experiment ended), wrongly kept finished
    assert {status for status, _ in ours["final"].values()} == {"ERROR"}
    assert {status for status, _ in plain["final"].values()} == {"ERROR"}
    for trial_id, (status, failures) in ours["final"].items():
        assert (states[trial_id].status.value, states[trial_id].failures) == (status, failures)
    by_index = {tid.rsplit("_", 1)[-1]: v for tid, v in plain["final"].items()}
    plain_saved = {tid.rsplit("_", 1)[-1]: v for tid, v in plain["saved"].items()}
    compared = 0
    for trial_id, (ray_status, _) in ours["saved"].items():
        index = trial_id.rsplit("_", 1)[-1]
        if ray_status == "ERROR" and plain_saved.get(index, ("",))[0] == "ERROR":
            # Ray's state held the failure in both runs: the same counts and decisions
            assert ours["final"][trial_id] == by_index[index]
            compared += 1
        elif ray_status != "ERROR" and trial_id in states and states[trial_id].failures:
            # Ray's state missed a failure the log holds: the true count went to Ray
            assert ours["final"][trial_id][1] >= 2
    print(json.dumps({"with": ours["final"], "plain": plain["final"],
                      "saved_with": ours["saved"], "saved_plain": plain["saved"],
                      "compared": compared}))
