"""Helpers of the Tune integration tests: worker import path, reading the event log back."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


def worker_pythonpath() -> str:
    """PYTHONPATH that lets Ray workers import the package and the test trainables."""
    parts = [str(REPO), str(HERE), os.environ.get("PYTHONPATH", "")]
    return os.pathsep.join(p for p in parts if p)


def replay(url: str, experiment: str) -> dict[str, Any]:
    """Every trial's state folded from the stored events (a full replay, no snapshots)."""
    from statemachine.domain.machine import fold
    from statemachine.log import EventStore

    store = EventStore.open(url, create=False)
    try:
        return {
            trial_id: fold(trial_id, [e.event for e in store.read_trial(experiment, trial_id)])[0]
            for trial_id in store.list_trials(experiment)
        }
    finally:
        store.close()


def stored_events(url: str, experiment: str, trial_id: str) -> list[Any]:
    """The stored events of one trial, in order."""
    from statemachine.log import EventStore

    store = EventStore.open(url, create=False)
    try:
        return list(store.read_trial(experiment, trial_id))
    finally:
        store.close()


def explain_output(url: str, trial_id: str, experiment: str = "exp") -> str:
    """What ``trial-replay explain`` prints for one trial (it must exit 0)."""
    from click.testing import CliRunner

    from statemachine.cli import cli

    result = CliRunner().invoke(cli, ["--db", url, "explain", experiment, trial_id],
                                env={"COLUMNS": "4000"})
    assert result.exit_code == 0, result.output
    return result.output


def ray_trials(grid: Any) -> dict[str, tuple[str, int]]:
    """``{trial_id: (status, num_failures)}`` as Ray reports them in a ``ResultGrid``."""
    return {t.trial_id: (t.status, t.num_failures) for t in grid._experiment_analysis.trials}


def assert_log_matches_ray(url: str, experiment: str, grid: Any) -> dict[str, Any]:
    """The replayed log has exactly Ray's trials, statuses and failure counts."""
    states = replay(url, experiment)
    ours = {tid: (s.status.value, s.failures) for tid, s in states.items()}
    assert ours == ray_trials(grid)
    return states


def kill_group(proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    """SIGKILL a driver started in its own session, with its process group (Ray's helper
    processes linger otherwise), and wait for it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=timeout)
