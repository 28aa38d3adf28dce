"""A newcomer's first hour, second round (issue 29): ``--json`` on either side of the command,
``--db`` on a storage folder, words that are true (``1 failure``), ``show`` at 80 columns
keeping the error type, and ``nodes`` one row per machine."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.conftest import EXP, Run, copy_fixture
from tests.cli.test_bad_input import assert_one_line_error

# ------------------------------------------------------------------ --json on either side


@pytest.mark.parametrize("command", [["nodes", EXP], ["trials", EXP], ["explain", EXP,
                                                                         "c_given_up"],
                                     ["db", "current"]])
def test_json_before_the_command_is_the_json_after_it(
    invoke: Callable[..., Run], fixture_db: Path, command: list[str]
) -> None:
    before = invoke("--json", "--db", fixture_db, *command)
    after = invoke("--db", fixture_db, *command, "--json")
    assert before.exit_code == 0, before.stderr
    assert before.stdout == after.stdout
    json.loads(before.stdout)


def test_json_before_a_command_without_json_is_one_line(
    invoke: Callable[..., Run], fixture_db: Path
) -> None:
    line = assert_one_line_error(invoke("--json", "--db", fixture_db, "serve"), "serve")
    assert "--json" in line


# ------------------------------------------------------------------ --db on a storage folder


def _storage(tmp_path: Path, *experiments: str) -> Path:
    storage = tmp_path / "ray_results"
    for name in experiments:
        (storage / name).mkdir(parents=True)
        copy_fixture(storage / name / "statemachine.db")
    (storage / "not_an_experiment").mkdir(parents=True)
    return storage


def test_db_on_a_storage_folder_picks_its_only_experiment(
    invoke: Callable[..., Run], tmp_path: Path
) -> None:
    storage = _storage(tmp_path, "flaky")
    run = invoke("--db", storage, "trials", EXP, "--json")
    assert run.exit_code == 0, run.stderr
    assert {r["trial_id"] for r in json.loads(run.stdout)} >= {"c_given_up"}
    assert invoke("--db", f"{storage}/", "verify").exit_code == 0  # `--db results/`


def test_db_on_a_storage_folder_of_several_experiments_lists_them(
    invoke: Callable[..., Run], tmp_path: Path
) -> None:
    storage = _storage(tmp_path, "flaky", "steady")
    line = assert_one_line_error(invoke("--db", storage, "trials"), str(storage))
    assert "2 experiments" in line
    assert str(storage / "flaky") in line and str(storage / "steady") in line


def test_db_on_a_folder_without_any_log_says_so(
    invoke: Callable[..., Run], tmp_path: Path
) -> None:
    empty = _storage(tmp_path)
    line = assert_one_line_error(invoke("--db", empty, "trials"), "no event log")
    assert "statemachine.db" in line and "one level down" in line


def test_db_on_a_storage_folder_reads_nothing_deeper(
    invoke: Callable[..., Run], tmp_path: Path
) -> None:
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    shutil.copyfile(copy_fixture(tmp_path / "x.db"), deep / "statemachine.db")
    assert_one_line_error(invoke("--db", tmp_path, "trials"), "no event log")


# ------------------------------------------------------------------ words that are true


def test_what_if_counts_one_failure_in_the_singular(
    invoke: Callable[..., Run], fixture_db: Path
) -> None:
    run = invoke("--db", fixture_db, "what-if", EXP, "--max-failures", "0", "--wide")
    assert run.exit_code == 0, run.stderr
    assert "1 failures" not in run.stdout and "event(s)" not in run.stdout
    assert "ERROR (errored, 1 failure)" in run.stdout
    assert "ERROR (errored, 2 failures)" in run.stdout
    assert "TERMINATED (clean, 0 failures)" in run.stdout


@pytest.mark.parametrize("width", [80, 120, 200])
def test_show_keeps_the_error_type_of_a_failure_at_every_width(
    invoke: Callable[..., Run], fixture_db: Path, width: int
) -> None:
    run = invoke("--db", fixture_db, "show", EXP, "c_given_up", env={"COLUMNS": str(width)})
    assert run.exit_code == 0, run.stderr
    failures = [line for line in run.stdout.splitlines() if " TrialFailed " in line]
    assert len(failures) == 4
    assert "TrainingError" in failures[0]
    assert all("RestoreError" in line for line in failures[1:]), run.stdout
    assert all(("RETRY_RESTORE" in line or "GIVE_UP" in line) for line in failures[1:])


# ------------------------------------------------------------------ nodes: one row per machine


@pytest.fixture
def two_ray_sessions(tmp_path: Path) -> Path:
    """One machine (10.0.0.5, box) under two Ray node ids: the driver restarted Ray."""
    from statemachine.domain.events import TrialAdded, TrialFailed, TrialStarted
    from statemachine.domain.failures import TrainingError
    from statemachine.domain.nodes import NodeRef
    from statemachine.domain.policy import RetryPolicy
    from statemachine.log import ExperimentLog

    db = tmp_path / "statemachine.db"
    for node_id in ("c1" * 28, "d2" * 28):
        log = ExperimentLog.open(str(db), "restarted", RetryPolicy(max_failures=5))
        node = NodeRef(node_id, "10.0.0.5", "box")
        try:
            for trial in ("t1", "t2"):
                if node_id == "c1" * 28:
                    log.record(trial, TrialAdded({}))
                log.record(trial, TrialStarted(node=node))
                log.record(trial, TrialFailed(TrainingError("builtins.ValueError", "x"),
                                              node=node))
        finally:
            log.close()
    return db


def test_nodes_shows_one_machine_as_one_host_with_its_node_ids_under_it(
    invoke: Callable[..., Run], two_ray_sessions: Path
) -> None:
    run = invoke("--db", two_ray_sessions, "nodes", env={"COLUMNS": "200"})
    assert run.exit_code == 0, run.stderr
    lines = run.stdout.splitlines()
    hosts = [line for line in lines if "10.0.0.5" in line]
    assert len(hosts) == 1, run.stdout  # one machine, one row with its address
    host = lines.index(hosts[0])
    assert "box" in hosts[0] and hosts[0].split()[-7:] == ["4", "0", "4", "0", "0", "0", "2"]
    ids = [line for line in lines if "c1c1c1c1c1c1..." in line or "d2d2d2d2d2d2..." in line]
    assert len(ids) == 2 and all(lines.index(i) > host for i in ids)
    assert all(i.split()[-7:] == ["2", "0", "2", "0", "0", "0", "2"] for i in ids)
    # --json stays one row per Ray node (keys only added): scripts keep working
    rows = json.loads(invoke("--db", two_ray_sessions, "nodes", "--json").stdout)
    assert [r["node_id"] for r in rows] == ["c1" * 28, "d2" * 28]
    assert {r["host"] for r in rows} == {"10.0.0.5"}


def test_nodes_of_the_fixture_group_the_ip_only_failure_under_its_host(
    invoke: Callable[..., Run], fixture_db: Path
) -> None:
    lines = invoke("--db", fixture_db, "nodes", EXP, env={"COLUMNS": "120"}).stdout.splitlines()
    rows = [line.split() for line in lines if "10.0.0.8" in line]
    assert len(rows) == 1 and "worker-b" in rows[0]
    under = lines[lines.index(next(x for x in lines if "10.0.0.8" in x)) + 1:][:2]
    assert "b8b8b8b8b8b8..." in under[0] and under[1].split()[0] == "(no"
