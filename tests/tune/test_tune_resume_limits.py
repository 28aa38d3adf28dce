"""Trials created after Ray's last save: the user's ``Tuner.restore`` options apply (issue 27).

One crash, reused by every case: 4 trials x 5 iterations of 0.3 s, 2 at a time, Ray's
experiment state saved at the start only (``TUNE_GLOBAL_CHECKPOINT_S=300``), no retry; the
third trial (``x=3``) raises at its third iteration while ``<ctl>/fail`` exists. The driver is
SIGKILLed once the third has ended in ERROR in the log and the fourth runs with a logged
checkpoint: both were created after Ray's only save, so Ray's search algorithm creates them
again after ``Tuner.restore`` (:mod:`statemachine.tune.resume_regenerated`). The killed
experiment folder is copied aside and put back before each restore (in this process, on one
Ray), so each case starts from the same crash.

The errored trial is checked against what Ray itself does with a trial its saved state holds
as ERROR (the same trial, run alone to its error under plain Ray, then restored the same
way): kept ERROR with its error, last result and checkpoint (default), resumed from its
newest checkpoint with its failure count (``resume_errored=True``), restarted from scratch
(``restart_errored=True``). With ``resume_unfinished=False`` the fourth is skipped as Ray skips
an unfinished trial of its saved state: ended TERMINATED with its newest logged checkpoint,
never run again.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from resume_crashes import Crashes
from resume_trainables import executed, function_counted

from statemachine.cli import cli
from statemachine.log import EventStore, verify
from statemachine.tune.resume_regenerated import RESTART_ERRORED
from tests.ray_support import running_ray
from tests.tune.tunekit import worker_pythonpath

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ITERS, STEP_S, FAIL_AT = 5, 0.3, 3
ERRED, RUNNING = "_00002", "_00003"  # the third trial (x=3) and the fourth (x=4)


@dataclass
class Killed:
    """The killed experiment, its pristine copy, and what the kill left."""

    tmp: Path
    run: Crashes
    executed: list[tuple[str, int]]

    @property
    def experiment(self) -> Path:
        return self.tmp / "results" / "exp"

    def put_back(self) -> None:
        """The experiment folder and the executed iterations as the kill left them."""
        shutil.rmtree(self.tmp / "results", ignore_errors=True)
        shutil.copytree(self.tmp / "killed", self.tmp / "results")
        self.run.ctl.joinpath("executed").write_text(
            "".join(f"{t} {i}\n" for t, i in self.executed))


def _erred_in_log(run: Crashes) -> bool:
    """The third trial is ERROR in the log with its error files on storage, the fourth has a
    logged checkpoint (read only once the fourth is past its second iteration)."""
    if sum(t.endswith(RUNNING) for t, _ in executed(run.ctl)) < 2:
        return False
    folders = list(Path(run.storage, "exp").glob(f"*{ERRED}*/statemachine_error.pkl"))
    if not folders:
        return False
    try:
        with EventStore.open(f"sqlite:///{run.log_path()}", create=False) as store:
            return any(e.type_name == "TrialFailed" for t in store.list_trials("exp")
                       if t.endswith(ERRED) for e in store.read_trial("exp", t))
    except Exception:  # the driver is writing: ask again
        return False


@pytest.fixture(scope="module")
def killed(tmp_path_factory: pytest.TempPathFactory) -> Killed:
    tmp = tmp_path_factory.mktemp("limits")
    run = Crashes(tmp, str(tmp / "results"), 4, ITERS, STEP_S,
                  env={"TUNE_GLOBAL_CHECKPOINT_S": "300",
                       "RESUME_FAIL": f'{{"3": {FAIL_AT}}}'})
    run.ctl.mkdir(parents=True)
    (run.ctl / "fail").touch()
    run.kill_after(run.driver("fit", "function"), lambda runs: _erred_in_log(run))
    shutil.copytree(tmp / "results", tmp / "killed")
    return Killed(tmp, run, executed(run.ctl))


@pytest.fixture(scope="module")
def ray_cluster(killed: Killed) -> Iterator[None]:  # after the crash: one Ray at a time
    with running_ray(worker_pythonpath()):
        yield


def _rows(grid: Any) -> dict[int, dict[str, Any]]:
    """Per config ``x``: what the ``ResultGrid`` shows, and Ray's failure count."""
    failures = {t.config["x"]: t.run_metadata.num_failures
                for t in grid._experiment_analysis.trials}
    rows = {}
    for result in grid:
        error = result.error
        rows[result.config["x"]] = {
            "error": None if error is None else (type(error).__name__,
                                                 f"boom at iteration {FAIL_AT}" in str(error)),
            "iteration": result.metrics.get("training_iteration"),
            "checkpoint": result.checkpoint.path.rstrip("/").rsplit("/", 1)[-1]
            if result.checkpoint else None,
            "failures": failures[result.config["x"]]}
    return rows


def _restore(path: Path, ctl: Path, fail: bool, **options: bool) -> dict[int, dict[str, Any]]:
    """``Tuner.restore(path, **options)`` to the end, in this process, on its Ray."""
    import ray._private.worker
    from ray import tune

    # Ray stages an experiment's files under the session's ``artifacts/<the experiment's
    # start>/<name>`` and uploads that folder at every save: a restore of the same experiment
    # in the same session would upload the previous restore's experiment states
    session = Path(ray._private.worker._global_node.get_session_dir_path())
    for staged in session.glob("artifacts/*/exp"):
        shutil.rmtree(staged)
    (ctl / "fail").unlink(missing_ok=True)
    if fail:
        (ctl / "fail").touch()
    return _rows(tune.Tuner.restore(str(path), trainable=function_counted, **options).fit())


@pytest.fixture(scope="module")
def ray_alone(killed: Killed, ray_cluster: None) -> dict[str, Any]:
    """Plain Ray with a trial its saved state holds as ERROR: the third trial alone, run to
    its error, restored each way (rows for ``x=3``, and the iterations each restore ran)."""
    from ray import tune

    from statemachine.tune import RunConfig

    tmp = killed.tmp / "alone"
    ctl = tmp / "ctl"
    ctl.mkdir(parents=True)
    (ctl / "fail").touch()
    tune.Tuner(function_counted,
               param_space={"ctl": str(ctl), "iters": ITERS, "step_s": STEP_S, "x": 3,
                            "fail_at": {"3": FAIL_AT}},
               run_config=RunConfig(name="exp", storage_path=str(tmp / "results"),
                                    verbose=0)).fit()
    shutil.copytree(tmp / "results", tmp / "saved")
    out: dict[str, Any] = {}
    for case, options in _CASES.items():
        shutil.rmtree(tmp / "results")
        shutil.copytree(tmp / "saved", tmp / "results")
        before = len(executed(ctl))
        out[case] = (_restore(tmp / "results" / "exp", ctl, case == "default",
                              **options)[3], [it for _, it in executed(ctl)[before:]])
    return out


_CASES: dict[str, dict[str, bool]] = {"default": {}, "resume": {"resume_errored": True},
                                      "restart": {"restart_errored": True}}


def _log(killed: Killed, suffix: str) -> tuple[str, str, list[Any]]:
    url = f"sqlite:///{killed.experiment / 'statemachine.db'}"
    with EventStore.open(url, create=False) as store:
        assert verify(store, "exp").ok
        (trial,) = [t for t in store.list_trials("exp") if t.endswith(suffix)]
        events = [e.event for e in store.read_trial("exp", trial)]
    return url, trial, events


def _explain(url: str, trial: str) -> str:
    result = CliRunner().invoke(cli, ["--db", url, "explain", "exp", trial],
                                env={"COLUMNS": "4000"})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("case", list(_CASES))
def test_a_trial_that_errored_after_rays_last_save_is_resumed_as_ray_would(
    killed: Killed, ray_alone: dict[str, Any], case: str
) -> None:
    killed.put_back()
    assert killed.run.logged_at_kills[0][next(
        t for t in killed.run.logged_at_kills[0] if t.endswith(ERRED))] == FAIL_AT - 1
    rows = _restore(killed.experiment, killed.run.ctl, case == "default", **_CASES[case])
    theirs, ran = ray_alone[case]
    if case == "restart":  # Ray's Trial.reset shares the old trial's StorageContext, and its
        # checkpoint numbers continue the old trial's in the new folder: ours start at 0
        assert (theirs["checkpoint"], rows[3]["checkpoint"]) == (
            f"checkpoint_{ITERS + FAIL_AT - 2:06d}", f"checkpoint_{ITERS - 1:06d}")
        theirs = {**theirs, "checkpoint": rows[3]["checkpoint"]}
    assert rows[3] == theirs, (rows[3], theirs)
    url, trial, events = _log(killed, ERRED)
    again = [it for t, it in executed(killed.run.ctl)[len(killed.executed):] if t == trial]
    assert again == ran  # the same iterations as Ray's own restore of its ERROR trial
    kinds = [type(e).__name__ for e in events]
    assert "TrialRecreated" not in kinds
    words = _explain(url, trial)
    if case == "default":
        assert theirs["error"] == ("RayTaskError(RuntimeError)", True) and ran == []
        (kept,) = [e for e in events if type(e).__name__ == "ResumeAdvanced"]
        assert (kept.finished, kept.to_checkpoint.rsplit("/", 1)[-1]) == (
            "ERROR", f"checkpoint_{FAIL_AT - 2:06d}")
        assert f"kept ERROR with checkpoint_{FAIL_AT - 2:06d}, not run again" in words
    elif case == "resume":
        assert ran == list(range(FAIL_AT, ITERS + 1)) and theirs["failures"] == 1
        resets = [e for e in events if type(e).__name__ == "TrialReset"]
        assert [r.from_scratch for r in resets] == [False]
        assert f"resumed from checkpoint_{FAIL_AT - 2:06d}" in words
    else:
        assert ran == list(range(1, ITERS + 1)) and theirs["failures"] == 0
        resets = [e for e in events if type(e).__name__ == "TrialReset"]
        assert [r.from_scratch for r in resets] == [True]
        (why,) = [e for e in events if type(e).__name__ == "ResumeNotAdvanced"]
        assert why.reason == RESTART_ERRORED
        assert (f"Run from scratch although the log recorded checkpoint_{FAIL_AT - 2:06d}: "
                f"{RESTART_ERRORED}; that work is redone." in words)
    # the others as an uninterrupted run's, the fourth resumed from its newest checkpoint
    for x in (1, 2, 4):
        assert (rows[x]["error"], rows[x]["iteration"]) == (None, ITERS), rows
    url, fourth, _ = _log(killed, RUNNING)
    logged = killed.run.logged_at_kills[0][fourth]
    assert [it for t, it in executed(killed.run.ctl)[len(killed.executed):]
            if t == fourth] == list(range(logged + 1, ITERS + 1))


def test_resume_unfinished_false_skips_a_trial_created_after_the_save_as_ray_would(
    killed: Killed, ray_cluster: None
) -> None:
    """Ray's ``resume_unfinished=False`` skips an unfinished trial of its saved state (ended
    TERMINATED with its last result and checkpoint, never run again): so is the fourth, with
    the newest checkpoint the log recorded, and the log says so."""
    from statemachine.tune.reconcile import NOT_RESUMED

    killed.put_back()
    rows = _restore(killed.experiment, killed.run.ctl, True, resume_unfinished=False)
    url, fourth, events = _log(killed, RUNNING)
    logged = killed.run.logged_at_kills[0][fourth]
    assert logged >= 1
    assert rows[4] == {"error": None, "iteration": logged,
                       "checkpoint": f"checkpoint_{logged - 1:06d}", "failures": 0}
    assert [t for t, _ in executed(killed.run.ctl)[len(killed.executed):]] == []
    kinds = [type(e).__name__ for e in events]
    assert "ResumeAdvanced" not in kinds and "ResumeNotAdvanced" not in kinds
    assert [e.reason for e in events if type(e).__name__ == "TrialStopped"] == [NOT_RESUMED]
    assert f"Stopped ({NOT_RESUMED})." in _explain(url, fourth)
    assert rows[3]["error"] == ("RayTaskError(RuntimeError)", True)  # errored: skipped
