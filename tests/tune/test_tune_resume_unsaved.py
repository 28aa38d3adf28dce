"""Trials created after Ray's last save of the experiment state, after a driver crash (issue 27).

Function trainable, 5 iterations a trial, 2 trials at a time, a checkpoint every iteration,
Ray's experiment state saved at the start only (``TUNE_GLOBAL_CHECKPOINT_S=300``): every trial
created when another ends is created after that save, and Ray's restore does not have it. Its
search algorithm creates it again, with the same id and config, and would run it from scratch
in a new folder. Before Ray queues it the callback points it at its old folder and resumes it
from what the log knows (:func:`~statemachine.tune.resume_regenerated.advance_regenerated`): an
end the log saw is kept (and told to the search algorithm), a running one resumes from its
newest logged checkpoint. The driver is SIGKILLed once and restored to the end
(:mod:`resume_crashes`). Asserted: no iteration is redone beyond any trial's last logged
checkpoint, the log says what it did (``ResumeAdvanced``, worded by ``explain``) and records no
new incarnation, the final ``ResultGrid`` is an uninterrupted run's and the log verifies.
With ``resume_from_log=False`` such a trial runs from scratch and the log says why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from resume_crashes import Crashes
from resume_trainables import executed

from statemachine.log import EventStore, verify
from statemachine.tune.resume_from_log import TURNED_OFF
from tests.tune.tunekit import explain_output

pytestmark = [pytest.mark.ray, pytest.mark.slow]

TRIALS, ITERS, STEP_S = 3, 5, 0.3


def _crash_and_resume(tmp_path: Path, callback: str) -> tuple[Crashes, dict[str, Any]]:
    run = Crashes(tmp_path, str(tmp_path / "results"), TRIALS, ITERS, STEP_S,
                  callback=callback, env={"TUNE_GLOBAL_CHECKPOINT_S": "300"})
    grid = run.run("function", kills=1, seed="2027-unsaved",
                   first=(2 * ITERS + 2, 2 * ITERS + 3))
    return run, grid


def _trial(run: Crashes, suffix: str) -> tuple[str, str, list[Any]]:
    """The log's URL (it verifies), the id and the events of the trial ``*suffix``."""
    url = f"sqlite:///{run.log_path()}"
    with EventStore.open(url, create=False) as store:
        assert verify(store, "exp").ok
        (trial,) = [t for t in store.list_trials("exp") if t.endswith(suffix)]
        events = [e for e in store.read_trial("exp", trial)]
    return url, trial, events


def test_trials_created_after_rays_last_save_stay_finished_or_resume_from_the_log(
    tmp_path: Path
) -> None:
    """4 trials, the first 20 times slower: the second ends, the third runs and ends, the
    fourth starts, all after Ray's only save; the kill comes at the fourth's second
    iteration. The third stays finished (the search algorithm is told, or the fourth would
    never be created again), the fourth resumes from its newest logged checkpoint."""
    run = Crashes(tmp_path, str(tmp_path / "results"), 4, ITERS, STEP_S,
                  env={"TUNE_GLOBAL_CHECKPOINT_S": "300", "RESUME_SLOW": '{"1": 20}'})
    grid = run.run("function", kills=1, seed="2027-unsaved",
                   first=lambda runs: ("_00003" in {t[-6:] for t, it in runs if it >= 2}))
    assert grid == run.uninterrupted_grid()
    # nothing redone beyond each trial's last logged checkpoint, regenerated ones included
    assert run.redone_beyond_checkpoints() == []
    url, third, events = _trial(run, "_00002")
    assert run.logged_at_kills[0][third] == ITERS, "the third trial had not ended at the kill"
    assert sum(trial == third for trial, _ in executed(run.ctl)) == ITERS  # not run again
    kinds = [e.type_name for e in events]
    assert "ResumeNotAdvanced" not in kinds and "TrialRecreated" not in kinds
    (kept,) = [e.event for e in events if e.type_name == "ResumeAdvanced"]
    assert (kept.from_checkpoint, kept.finished) == (None, "TERMINATED")
    assert kept.to_checkpoint.endswith(f"checkpoint_{ITERS - 1:06d}")
    assert (f"kept TERMINATED with checkpoint_{ITERS - 1:06d}, not run again"
            in explain_output(url, third))
    url, fourth, events = _trial(run, "_00003")
    logged = run.logged_at_kills[0][fourth]
    assert logged >= 1, "the log held no checkpoint of the fourth trial at the kill"
    kinds = [e.type_name for e in events]
    assert "ResumeNotAdvanced" not in kinds and "TrialRecreated" not in kinds
    (advanced,) = [e.event for e in events if e.type_name == "ResumeAdvanced"]
    assert (advanced.from_checkpoint, advanced.finished) == (None, None)
    assert advanced.to_checkpoint.endswith(f"checkpoint_{logged - 1:06d}")
    assert advanced.iterations_saved == logged
    # each in the same folder as before the crash: no second folder for either
    for trial in (third, fourth):
        folders = [p.name for p in Path(tmp_path, "results", "exp").iterdir()
                   if p.is_dir() and trial in p.name]
        assert len(folders) == 1, folders
    words = "iteration" if logged == 1 else "iterations"
    assert (f"Ray's saved state was {logged} {words} older; resumed from "
            f"checkpoint_{logged - 1:06d} (Ray would have run it from scratch)"
            in explain_output(url, fourth))


def test_turned_off_the_trial_runs_from_scratch_and_the_log_says_why(tmp_path: Path) -> None:
    run, grid = _crash_and_resume(tmp_path, "off")
    assert grid == run.uninterrupted_grid()
    url, third, events = _trial(run, "_00002")
    logged = run.logged_at_kills[0][third]
    assert logged >= 1, "the log held no checkpoint of the third trial at the kill"
    runs = [it for trial, it in run.redone_beyond_checkpoints() if trial == third]
    assert set(range(1, logged + 1)) <= set(runs)
    not_advanced = [e.event for e in events if e.type_name == "ResumeNotAdvanced"]
    assert [e.reason for e in not_advanced] == [TURNED_OFF]
    assert not_advanced[0].checkpoint.endswith(f"checkpoint_{logged - 1:06d}")
    assert "TrialRecreated" not in [e.type_name for e in events]
    assert f"checkpoint_{logged - 1:06d}: {TURNED_OFF}; that work is redone" in explain_output(
        url, third)
