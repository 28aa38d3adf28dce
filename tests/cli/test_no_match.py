"""A listing that matches nothing says so in one line, naming what was asked and what the
log holds instead (not an empty table a newcomer must decode), exits 0, and its ``--json``
stays a valid empty list."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from statemachine.domain.events import TrialAdded
from statemachine.domain.policy import RetryPolicy
from statemachine.log import ExperimentLog
from tests.cli.conftest import EXP, Run


def _one_line(run: Run) -> str:
    assert run.exit_code == 0, run.stderr
    assert run.stdout.count("\n") == 1, run.stdout
    return " ".join(run.stdout.split())


def test_a_status_no_trial_has_names_the_statuses_there_are(
    invoke: Callable[..., Run], fixture_db: Path,
) -> None:
    line = _one_line(invoke("--db", fixture_db, "trials", EXP, "--status", "paused"))
    assert line == (f"no trial of experiment {EXP} has status PAUSED "
                    "(statuses here: TERMINATED 4, ERROR 2)")
    listed = invoke("--db", fixture_db, "trials", EXP, "--status", "PAUSED", "--json")
    assert listed.exit_code == 0 and json.loads(listed.stdout) == []
    # a status some trials have is still the table
    assert "Trials of" in invoke("--db", fixture_db, "trials", EXP, "--status", "ERROR").stdout


def test_at_a_point_the_line_says_then_and_where(
    invoke: Callable[..., Run], fixture_db: Path,
) -> None:
    line = _one_line(invoke("--db", fixture_db, "trials", EXP, "--status", "ERROR", "--at", "2"))
    assert line == (f"no trial of experiment {EXP} had status ERROR at position 2 "
                    "(statuses then: PENDING 1)")
    line = _one_line(invoke("--db", fixture_db, "trials", EXP, "--at", "2000-01-01"))
    assert line == f"experiment {EXP} had no trials at time 2000-01-01T00:00:00+00:00"


def test_an_experiment_without_trials_or_attempts(
    invoke: Callable[..., Run], tmp_path: Path,
) -> None:
    db = tmp_path / "log.db"
    with ExperimentLog.open(db, "empty", RetryPolicy()):
        pass
    with ExperimentLog.open(db, "pending", RetryPolicy()) as log:
        log.record("t1", TrialAdded(config={}))
    assert _one_line(invoke("--db", db, "trials", "empty")) == (
        "experiment empty has no trials yet")
    assert _one_line(invoke("--db", db, "trials", "empty", "--status", "ERROR")) == (
        "experiment empty has no trials yet")
    for name in ("empty", "pending"):
        assert _one_line(invoke("--db", db, "nodes", name)) == (
            f"no trial of experiment {name} has started yet: no node to show")
        assert json.loads(invoke("--db", db, "nodes", name, "--json").stdout) == []
    assert _one_line(invoke("--db", db, "what-if", "empty", "--max-failures", "2")) == (
        "experiment empty has no trials yet: nothing to replay with max_failures=2")
    whatif = json.loads(invoke("--db", db, "what-if", "empty", "--max-failures", "2",
                               "--json").stdout)
    assert whatif["trials"] == []
    assert json.loads(invoke("--db", db, "trials", "empty", "--json").stdout) == []


def test_experiments_of_an_empty_log(invoke: Callable[..., Run], tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    assert invoke("--db", db, "db", "upgrade").exit_code == 0
    assert _one_line(invoke("--db", db, "experiments")) == "No experiments in this event log."
    listed = invoke("--db", db, "experiments", "--json")
    assert listed.exit_code == 0 and json.loads(listed.stdout) == []
