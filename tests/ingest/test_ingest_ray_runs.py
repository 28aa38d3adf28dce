"""``trial-replay ingest`` of real Ray runs made WITHOUT the callback, on the installed Ray
(CI runs this module on Ray 2.60 and, in its old-Ray leg, on 2.40).

The runs are made once for the module (:mod:`tests.ingest.ingest_runs`), on one
``ray.init(num_cpus=2)``: a class trainable with training failures, an actor death and a
``load_checkpoint`` that fails under ``TUNE_RESTORE_RETRY_NUM=2``; and a function trainable
whose driver is SIGKILLed (one trial already ERROR) and resumed with
``Tuner.restore(..., resume_errored=True)``, ingested right after the kill and again at the
end. Every test only reads what they left.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from ingest_runs import RESTORE_RETRIES, run_crash, run_faults, worker_pythonpath

from tests.ingest.conftest import (
    assert_agrees_with_ray,
    ingest_json,
    log_events,
    log_trials,
    run_cli,
    tags,
)
from tests.ray_support import running_ray

pytestmark = [pytest.mark.ray, pytest.mark.slow]


@dataclass
class Runs:
    """What the module's runs left."""

    base: Path
    faults: Path
    faults_view: dict[str, list[Any]]
    crash: Path
    crash_view: dict[str, list[Any]]
    at_kill: dict[str, Any]
    """The ingest made right after the SIGKILL, into ``base/incremental.db``."""
    at_kill_copy: Path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    base = tmp_path_factory.mktemp("runs")
    at_kill: dict[str, Any] = {}

    def ingest_at_kill(folder: Path) -> None:
        shutil.copytree(folder, base / "at-kill")
        at_kill.update(ingest_json(folder, "--db", base / "incremental.db"))

    with running_ray(worker_pythonpath()):
        faults_view = run_faults(base / "results", base / "ctl")
        crash = run_crash(base / "crash", between=ingest_at_kill)
    yield Runs(base, base / "results" / "faults", faults_view, crash.folder, crash.ray_view,
               at_kill, base / "at-kill")


def test_training_and_restore_failures(runs: Runs, tmp_path: Path) -> None:
    db = tmp_path / "faults.db"
    report = ingest_json(runs.faults, "--db", db)
    assert_agrees_with_ray(runs.faults, db, "faults", runs.faults_view)
    # Some trials ERROR, some recovered; every disagreement would be named.
    assert sorted(status for status, _ in runs.faults_view.values()) == [
        "ERROR", "ERROR", "TERMINATED", "TERMINATED"]
    assert all(t["disagreement"] is None for t in report["trials"])
    assert report["restore_retry_num_inferred"] == RESTORE_RETRIES
    ids = tags(runs.faults)
    failed = [(e.error_type, e.decision) for e in log_events(db, "faults")
              if e.type_name == "TrialFailed" and e.trial_id == ids["restore"]]
    assert failed == [("TrainingError", "RECOVER"),
                      *[("RestoreError", "RETRY_RESTORE")] * RESTORE_RETRIES,
                      ("RestoreError", "GIVE_UP")]
    died = [e.event.error for e in log_events(db, "faults")
            if e.type_name == "TrialFailed" and e.trial_id == ids["died"]]
    assert [(type(e).__name__, e.preempted) for e in died] == [("ActorError", False)]


def test_a_killed_and_resumed_driver(runs: Runs, tmp_path: Path) -> None:
    ids = tags(runs.crash)
    at_kill = {t["trial_id"]: t for t in runs.at_kill["trials"]}
    # At the kill, Ray's state had trial e ERROR: so had the log.
    assert at_kill[ids["e"]]["status"] == at_kill[ids["e"]]["ray_status"] == "ERROR", at_kill
    db = runs.base / "incremental.db"
    resumed = ingest_json(runs.crash, "--db", db)
    assert resumed["epoch"] == 2 and resumed["events_added"] > 0
    # Nothing the resumed run did was left out as older than what the log held.
    assert all(not t["not_added"] and t["disagreement"] is None for t in resumed["trials"]), \
        resumed["trials"]
    assert_agrees_with_ray(runs.crash, db, "crash", runs.crash_view)
    # resume_errored=True ran e again: TERMINATED with num_failures above max_failures=0.
    assert runs.crash_view[ids["e"]] == ["TERMINATED", 1]
    types = [e.type_name for e in log_events(db, "crash") if e.trial_id == ids["e"]]
    assert types[types.index("TrialFailed"):][:2] == ["TrialFailed", "TrialReset"]
    # The same history as one ingest of the finished folder.
    fresh = tmp_path / "fresh.db"
    ingest_json(runs.crash, "--db", fresh)
    assert log_trials(fresh, "crash") == log_trials(db, "crash")
    incremental = sorted((e.trial_id, e.type_name, e.payload_json)
                         for e in log_events(db, "crash"))
    whole = sorted((e.trial_id, e.type_name, e.payload_json) for e in log_events(fresh, "crash"))
    assert incremental == whole, (set(incremental) ^ set(whole), resumed["trials"])
    explain = " ".join(run_cli("--db", db, "explain", ids["e"])[1].split())
    assert "Queued again after ending in ERROR" in explain
    assert "Reconstructed from Ray's files by trial-replay ingest (epoch 1, 2)" in explain


def test_the_folder_at_the_kill_reads_on_its_own(runs: Runs, tmp_path: Path) -> None:
    """Ray's files as the SIGKILL left them: the history folds and agrees with Ray's saved
    state, except that Ray may have saved a running trial as PENDING."""
    db = tmp_path / "at-kill.db"
    report = ingest_json(runs.at_kill_copy, "--db", db, "--name", "crash")
    assert run_cli("--db", db, "verify")[0] == 0
    ids = tags(runs.at_kill_copy)
    trials = {t["trial_id"]: t for t in report["trials"]}
    assert (trials[ids["e"]]["status"], trials[ids["e"]]["num_failures"]) == ("ERROR", 1)
    running = trials[ids["s"]]
    assert (running["status"], running["num_failures"]) == ("RUNNING", 0)
    assert running["ray_status"] in ("RUNNING", "PENDING")
    assert all(t["disagreement"] is None for t in report["trials"])
