"""The installed ``trial-replay`` console script, run as a user runs it: in a subprocess."""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from statemachine.domain.events import TrialAdded, TrialFailed, TrialStarted
from statemachine.domain.failures import TrainingError
from statemachine.domain.policy import RetryPolicy
from tests.cli.conftest import EXP


def _script() -> str:
    found = Path(sys.executable).parent / "trial-replay"
    if found.is_file():
        return str(found)
    on_path = shutil.which("trial-replay")
    assert on_path, "the trial-replay console script is not installed: pip install -e ."
    return on_path


def _run(
    *args: str | Path, env: dict[str, str] | None = None, cwd: Path | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if k != "STATEMACHINE_DB_URL"}
    full_env.update(env or {})
    return subprocess.run([_script(), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=full_env, check=False, cwd=cwd)


def test_trials_json_through_the_console_script(fixture_db: Path) -> None:
    done = _run("--db", f"sqlite:///{fixture_db}", "trials", EXP, "--json")
    assert done.returncode == 0, done.stderr
    rows = {r["trial_id"]: r for r in json.loads(done.stdout)}
    assert rows["c_given_up"]["status"] == "ERROR"
    assert rows["c_given_up"]["total_restore_failures"] == 3


def test_db_from_the_environment(experiment_dir: Path) -> None:
    done = _run("explain", EXP, "c_given_up", env={"STATEMACHINE_DB_URL": str(experiment_dir)})
    assert done.returncode == 0, done.stderr
    assert "Restore failure # 2 on node 10.0.0.7 (node-id a7a7a7a7a7a7...) (retry 2 of 2)" in (
        " ".join(done.stdout.split()))


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = _run("--db", tmp_path / "missing.db", "trials", EXP)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("trial-replay: error: ")
    assert not (tmp_path / "missing.db").exists()


def test_unknown_experiment_through_the_script(fixture_db: Path) -> None:
    done = _run("--db", fixture_db, "trials", "fixture")
    assert done.returncode == 2
    assert "did you mean 'fixture_exp'" in done.stderr


def test_verify_exit_codes(fixture_db: Path) -> None:
    assert _run("--db", fixture_db, "verify").returncode == 0
    import sqlite3
    from contextlib import closing

    with closing(sqlite3.connect(fixture_db)) as conn, conn:
        conn.execute("UPDATE events SET status_after = 'PAUSED' "
                     "WHERE trial_id = 'a_recovered' AND seq = 3")
    done = _run("--db", fixture_db, "verify")
    assert done.returncode == 1
    assert "verify failed" in done.stderr and "a_recovered" in done.stderr


def test_help_and_version() -> None:
    done = _run("--help")
    assert done.returncode == 0
    for command in ("experiments", "trials", "show", "explain", "what-if", "verify", "export",
                    "import", "timeline", "diagram", "tail", "demo"):
        assert command in done.stdout
    assert _run("--version").returncode == 0


def _lines(stream: object, into: queue.Queue[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        into.put(line)


def _ctrl_c_as_in_a_terminal() -> None:
    """SIGINT back to its default in the child, so Python turns it into KeyboardInterrupt.

    A test run started in the background by a non-interactive shell (``.ci/run &``) has
    SIGINT ignored, and an ignored signal stays ignored across exec: Python then installs no
    handler and Ctrl-C (the test's SIGINT) never reaches ``tail --follow``. CI failed that way
    once (the follower ran on until the 90 s timeout).
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_tail_follow_shows_events_as_a_driver_records_them(fixture_db: Path) -> None:
    from statemachine.log import ExperimentLog

    proc = subprocess.Popen(
        [_script(), "--db", str(fixture_db), "tail", EXP, "--follow", "-n", "1",
         "--interval", "0.1", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=_ctrl_c_as_in_a_terminal,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_lines, args=(proc.stdout, lines), daemon=True).start()
    try:
        first = json.loads(lines.get(timeout=60))
        assert first["event"] == "TrialStopped"  # the last recorded event
        log = ExperimentLog.open(str(fixture_db), EXP, RetryPolicy(max_failures=1))
        try:
            log.record("g_live", TrialAdded({}))
            log.record("g_live", TrialStarted())
            log.record("g_live", TrialFailed(TrainingError("builtins.ValueError", "bad batch")))
            log.record("g_live", TrialStarted())
        finally:
            log.close()
        seen = [json.loads(lines.get(timeout=60)) for _ in range(5)]
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            proc.kill()  # never left running past the test
            proc.wait()
            raise
    assert [(e["trial_id"], e["event"]) for e in seen] == [
        ("g_live", "PolicySet"), ("g_live", "TrialAdded"), ("g_live", "TrialStarted"),
        ("g_live", "TrialFailed"), ("g_live", "TrialStarted")]
    assert seen[3]["decision"] == "RECOVER" and seen[3]["epoch"] == 3
    assert code == 0
    assert "Traceback" not in proc.stderr.read()  # type: ignore[union-attr]


@pytest.mark.parametrize("fmt", ["html", "svg", "png"])
def test_timeline_through_the_script(fixture_db: Path, tmp_path: Path, fmt: str) -> None:
    out = tmp_path / f"t.{fmt}"
    done = _run("--db", fixture_db, "timeline", EXP, "-o", out)
    assert done.returncode == 0, done.stderr
    assert out.stat().st_size > 1000
