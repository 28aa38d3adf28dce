"""A trial created after Ray's last save of the experiment state, after a driver crash (issue 27).

3 trials x 5 iterations (2 at a time, a checkpoint every iteration, function trainable), Ray's
experiment state saved at the start only (``TUNE_GLOBAL_CHECKPOINT_S=300``): the third trial
is created when one of the first two ends, after that save. The driver is SIGKILLed once the
third has run 2 or 3 iterations (the log holds a checkpoint of it) and the experiment restored
to its end (:mod:`resume_crashes`). Ray's restore does not have the third trial; its search
algorithm creates it again, with the same id and config, and would run it from scratch in a
new folder. Before Ray queues it, the callback points it at its old folder and its newest
checkpoint the log recorded (:func:`~statemachine.tune.resume_from_log.advance_regenerated`).
Asserted: no iteration is redone beyond any trial's last logged checkpoint, the third
included; the log says so (``ResumeAdvanced`` from scratch to that checkpoint, worded by
``explain``), records no new incarnation and no ``ResumeNotAdvanced``; the final
``ResultGrid`` is an uninterrupted run's and the log verifies. With
``resume_from_log=False`` the third trial runs from scratch and the log says why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from resume_crashes import Crashes

from statemachine.cli import cli
from statemachine.log import EventStore, verify
from statemachine.tune.resume_from_log import TURNED_OFF

pytestmark = [pytest.mark.ray, pytest.mark.slow]

TRIALS, ITERS, STEP_S = 3, 5, 0.3


def _crash_and_resume(tmp_path: Path, callback: str) -> tuple[Crashes, dict[str, Any]]:
    run = Crashes(tmp_path, str(tmp_path / "results"), TRIALS, ITERS, STEP_S,
                  callback=callback, env={"TUNE_GLOBAL_CHECKPOINT_S": "300"})
    grid = run.run("function", kills=1, seed="2027-unsaved",
                   first=(2 * ITERS + 2, 2 * ITERS + 3))
    return run, grid


def _third(run: Crashes) -> tuple[str, str, list[Any]]:
    url = f"sqlite:///{run.log_path()}"
    with EventStore.open(url, create=False) as store:
        assert verify(store, "exp").ok
        (third,) = [t for t in store.list_trials("exp") if t.endswith("_00002")]
        events = [e for e in store.read_trial("exp", third)]
    return url, third, events


def _explain(url: str, trial: str) -> str:
    result = CliRunner().invoke(cli, ["--db", url, "explain", "exp", trial],
                                env={"COLUMNS": "4000"})
    assert result.exit_code == 0, result.output
    return result.output


def test_a_trial_created_after_rays_last_save_resumes_from_its_newest_logged_checkpoint(
    tmp_path: Path
) -> None:
    run, grid = _crash_and_resume(tmp_path, "1")
    assert grid == run.uninterrupted_grid()
    url, third, events = _third(run)
    logged = run.logged_at_kills[0][third]
    assert logged >= 1, "the log held no checkpoint of the third trial at the kill"
    # nothing redone beyond each trial's last logged checkpoint, the third trial included
    assert run.redone_beyond_checkpoints() == []
    kinds = [e.type_name for e in events]
    assert "ResumeNotAdvanced" not in kinds and "TrialRecreated" not in kinds
    (advanced,) = [e.event for e in events if e.type_name == "ResumeAdvanced"]
    assert advanced.from_checkpoint is None and advanced.finished is None
    assert advanced.to_checkpoint.endswith(f"checkpoint_{logged - 1:06d}")
    assert advanced.iterations_saved == logged
    # the same folder as before the crash: no second folder for the trial
    folders = [p.name for p in Path(tmp_path, "results", "exp").iterdir()
               if p.is_dir() and third in p.name]
    assert len(folders) == 1, folders
    assert folders[0] in advanced.to_checkpoint
    words = "iteration" if logged == 1 else "iterations"
    assert (f"Ray's saved state was {logged} {words} older; resumed from "
            f"checkpoint_{logged - 1:06d} (Ray would have run it from scratch)"
            in _explain(url, third))


def test_turned_off_the_trial_runs_from_scratch_and_the_log_says_why(tmp_path: Path) -> None:
    run, grid = _crash_and_resume(tmp_path, "off")
    assert grid == run.uninterrupted_grid()
    url, third, events = _third(run)
    logged = run.logged_at_kills[0][third]
    assert logged >= 1, "the log held no checkpoint of the third trial at the kill"
    runs = [it for trial, it in run.redone_beyond_checkpoints() if trial == third]
    assert set(range(1, logged + 1)) <= set(runs)
    not_advanced = [e.event for e in events if e.type_name == "ResumeNotAdvanced"]
    assert [e.reason for e in not_advanced] == [TURNED_OFF]
    assert not_advanced[0].checkpoint.endswith(f"checkpoint_{logged - 1:06d}")
    assert "TrialRecreated" not in [e.type_name for e in events]
    assert f"checkpoint_{logged - 1:06d}: {TURNED_OFF}; that work is redone" in _explain(
        url, third)
