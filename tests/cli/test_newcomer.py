"""A newcomer's first commands (issue 13): --db anywhere, the experiment by default, Ray's
trial names and id prefixes, a three-slash SQLite URL, a missing PostgreSQL driver, and the
install name in every hint."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from statemachine.distribution import DISTRIBUTION
from tests.cli.conftest import EXP, Run
from tests.cli.test_bad_input import assert_one_line_error

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def single_db(invoke: Callable[..., Run], fixture_db: Path, tmp_path: Path) -> Path:
    """A log holding only ``fixture_exp`` (exported from the fixture and imported)."""
    exported = tmp_path / "exp.jsonl"
    assert invoke("--db", fixture_db, "export", EXP, "-o", exported).exit_code == 0
    target = tmp_path / "single.db"
    assert invoke("--db", target, "import", exported).exit_code == 0
    return target


@pytest.mark.parametrize("flag", ["--db", "-d"])
@pytest.mark.parametrize("where", ["before", "after"])
def test_db_before_or_after_the_command(
    invoke: Callable[..., Run], fixture_db: Path, flag: str, where: str
) -> None:
    args = [flag, fixture_db, "trials", EXP] if where == "before" else ["trials", EXP, flag,
                                                                        fixture_db]
    run = invoke(*args, "--json")
    assert run.exit_code == 0, run.stderr
    assert '"trial_id": "c_given_up"' in run.stdout


def test_db_after_a_nested_command(invoke: Callable[..., Run], fixture_db: Path) -> None:
    run = invoke("db", "current", "--db", fixture_db)
    assert run.exit_code == 0, run.stderr
    assert "current" in run.stdout or "head" in run.stdout


def test_db_after_the_command_wins_over_the_variable(
    invoke: Callable[..., Run], fixture_db: Path, tmp_path: Path
) -> None:
    env = {"STATEMACHINE_DB_URL": str(tmp_path / "missing.db")}
    assert invoke("verify", EXP, "--db", fixture_db, env=env).exit_code == 0


def test_the_only_experiment_is_the_default(
    invoke: Callable[..., Run], single_db: Path
) -> None:
    trials = invoke("--db", single_db, "trials", "--json")
    assert trials.exit_code == 0, trials.stderr
    assert '"trial_id": "c_given_up"' in trials.stdout
    explain = invoke("--db", single_db, "explain", "c_given_up")
    assert explain.exit_code == 0, explain.stderr
    assert explain.stdout.startswith("Trial c_given_up is ERROR")
    for command in (["nodes"], ["export"], ["tail", "-n", "1"],
                    ["what-if", "--max-failures", "3"], ["show", "c_given_up"]):
        run = invoke("--db", single_db, *command)
        assert run.exit_code == 0, (command, run.stderr)


def test_several_experiments_are_listed_when_none_is_given(
    invoke: Callable[..., Run], fixture_db: Path
) -> None:
    line = assert_one_line_error(invoke("--db", fixture_db, "trials"), "2 experiments")
    assert "fixture_exp" in line and "other_exp" in line


def test_unknown_experiment_without_a_close_name_lists_them(
    invoke: Callable[..., Run], fixture_db: Path
) -> None:
    assert_one_line_error(invoke("--db", fixture_db, "trials", "zzzz"),
                          "no experiment named 'zzzz'", "'fixture_exp', 'other_exp'")


@pytest.mark.parametrize("given", ["Flaky_c_given_up", "c_giv", "DemoTrainable_c_given_up"])
@pytest.mark.parametrize("command", ["show", "explain"])
def test_ray_trial_names_and_id_prefixes(
    invoke: Callable[..., Run], fixture_db: Path, given: str, command: str
) -> None:
    run = invoke("--db", fixture_db, command, EXP, given, "--json")
    assert run.exit_code == 0, run.stderr
    assert '"trial_id": "c_given_up"' in run.stdout


def test_ray_trial_name_in_what_if(invoke: Callable[..., Run], fixture_db: Path) -> None:
    run = invoke("--db", fixture_db, "what-if", EXP, "--max-failures", "3", "--trial",
                 "Flaky_c_given_up", "--json")
    assert run.exit_code == 0, run.stderr
    assert '"trial_id": "c_given_up"' in run.stdout and "a_recovered" not in run.stdout


def test_shared_prefix_is_ambiguous() -> None:
    from statemachine.cli.db import BadInput
    from statemachine.cli.reading import resolve_trial_id

    trials = ["947ed_00001", "947ed_00002"]
    assert resolve_trial_id("e", "Flaky_947ed_00002", trials) == "947ed_00002"
    assert resolve_trial_id("e", "947ed_00001", trials) == "947ed_00001"
    with pytest.raises(BadInput, match="ambiguous: 2 trial ids start with it"):
        resolve_trial_id("e", "947ed", trials)


def test_three_slash_sqlite_url_says_four(
    invoke: Callable[..., Run], fixture_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(fixture_db.parent)
    three = f"sqlite://{fixture_db}"  # sqlite:///tmp/... : the relative path tmp/...
    assert three.startswith("sqlite:///") and not three.startswith("sqlite:////")
    assert_one_line_error(invoke("--db", three, "experiments"), "four slashes",
                          f"sqlite:///{fixture_db}", "(that file exists)")
    four = invoke("--db", f"sqlite:///{fixture_db}", "experiments")
    assert four.exit_code == 0, four.stderr


def test_missing_postgres_driver_names_the_extra(
    invoke: Callable[..., Run], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [m for m in sys.modules if m == "psycopg" or m.startswith("psycopg.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg fails as if absent
    run = invoke("--db", "postgresql+psycopg://u@127.0.0.1:1/x", "experiments")
    assert_one_line_error(run, "psycopg", f"pip install '{DISTRIBUTION}[postgres]'")


def test_every_install_hint_names_the_distribution() -> None:
    """No hint in code or docs installs the unrelated ``statemachine`` of the index."""
    setup = (ROOT / "setup.cfg").read_text()
    assert f"name = {DISTRIBUTION}\n" in setup
    offenders = []
    for path in [*ROOT.glob("statemachine/**/*.py"), *ROOT.glob("docs/*.md"),
                 ROOT / "README.md"]:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if "pip install" in line and ("statemachine" in line) and DISTRIBUTION not in line:
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
            if "pip install 'statemachine[" in line or "pip install statemachine" in line:
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []


def _bin_path_without(folder: Path) -> str:
    return os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if p and Path(p).resolve() != folder.resolve())


def test_printed_commands_paste_without_the_venv_on_path(
    fixture_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from statemachine.cli.invocation import replay_command

    venv_bin = Path(sys.executable).parent
    monkeypatch.setenv("PATH", _bin_path_without(venv_bin))
    command = replay_command("--db", fixture_db, "trials", EXP, "--json")
    assert not command.startswith("trial-replay ")
    done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={**os.environ, "PATH": "/usr/bin:/bin"},
                          check=False)
    assert done.returncode == 0, (command, done.stderr)
    assert '"trial_id": "c_given_up"' in done.stdout


def test_printed_commands_are_short_when_the_script_is_on_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from statemachine.cli.invocation import replay_command

    venv_bin = Path(sys.executable).parent
    if not (venv_bin / "trial-replay").is_file():
        pytest.skip("trial-replay is not installed beside this Python")
    monkeypatch.setenv("PATH", os.pathsep.join([str(venv_bin), os.environ.get("PATH", "")]))
    assert replay_command("--db", "my folder", "trials") == "trial-replay --db 'my folder' trials"


def test_restore_of_a_trial_past_max_failures_is_a_refused_retry() -> None:
    """Tuner.restore(resume_errored=True) of a trial past max_failures: its first restore
    failure gives up at once, and explain says why (not "restore retries spent")."""
    from statemachine.cli.explain import explain_trial
    from statemachine.domain.events import (
        CheckpointSaved,
        PolicySet,
        RestoreSucceeded,
        TrialAdded,
        TrialFailed,
        TrialReset,
        TrialStarted,
    )
    from statemachine.domain.failures import RestoreError, TrainingError
    from statemachine.domain.policy import RetryPolicy

    policy = RetryPolicy(max_failures=1, restore_retry_num=3)
    events = [
        PolicySet(policy=policy), TrialAdded(), TrialStarted(), CheckpointSaved(checkpoint="c1"),
        TrialFailed(TrainingError("builtins.ValueError", "nan")),  # failure 1: RECOVER
        TrialStarted(restore_from="c1"), RestoreSucceeded(),
        TrialFailed(TrainingError("builtins.ValueError", "nan")),  # failure 2: GIVE_UP
        TrialReset(),  # Tuner.restore(resume_errored=True)
        TrialStarted(restore_from="c1"),
        TrialFailed(RestoreError("builtins.OSError", "storage unavailable")),
    ]
    explanation = explain_trial("t", [(None, e) for e in events])
    last = explanation.steps[-1]
    assert last.decision == "GIVE_UP"
    assert "(retry 1 of 3 refused: failures already exceed max_failures)" in last.text
    assert ("the restore retry was refused because failures (2) already exceed "
            "max_failures 1") in last.text
    assert "restore retries spent" not in last.text


def test_only_the_experiment_given_asks_for_the_trial(
    invoke: Callable[..., Run], single_db: Path
) -> None:
    assert_one_line_error(invoke("--db", single_db, "show", EXP), "Missing argument 'TRIAL'")
