"""Several driver processes on one log: fencing, and surviving a killed driver (no Ray)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from statemachine import Decision
from statemachine.log import EventStore, verify
from statemachine.log.migrate import current_revision, head_revision

CHILD = Path(__file__).with_name("driver_child.py")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest) -> str:
    """The same test on a SQLite file and on PostgreSQL."""
    return request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(CHILD), *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def read_line(process: subprocess.Popen[str], prefix: str) -> str:
    """The next line of the child's output starting with ``prefix`` (its remainder)."""
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith(prefix):
            return line[len(prefix) :].strip()
    raise AssertionError(f"no {prefix!r} line; stderr:\n{process.stderr.read()}")  # type: ignore[union-attr]


def test_newer_driver_fences_out_the_older_one(url: str) -> None:
    old = spawn("fence-old", url)
    read_line(old, "READY")
    assert old.stdout is not None
    acked = [old.stdout.readline().split()[1] for _ in range(20)]  # it is appending now
    new = spawn("fence-new", url, "30")
    assert read_line(new, "EPOCH") == "2"
    _, err = new.communicate(timeout=120)
    assert new.returncode == 0, err
    rest, err = old.communicate(timeout=120)
    assert old.returncode == 0, err
    acked += [line.split()[1] for line in rest.splitlines() if line.startswith("ACK ")]
    [fenced] = [line for line in rest.splitlines() if line.startswith("FENCED")]
    assert fenced == "FENCED FencedError 1 2"

    with EventStore.open(url, create=False) as store:
        stored = list(store.read_experiment("fenced"))
        [_, second] = store.list_sessions("fenced")
        assert verify(store, "fenced").ok
    old_events = [e for e in stored if e.trial_id == "old"]
    assert {e.event_id for e in old_events} >= set(acked)
    assert all(e.epoch == 1 for e in old_events)
    new_events = [e for e in stored if e.trial_id == "new"]
    assert len(new_events) == 33 and all(e.epoch == 2 for e in new_events)
    # Nothing interleaves: once epoch 2 began, only epoch 2 wrote.
    last_old = max(e.position for e in stored if e.epoch == 1)
    assert last_old < min(e.position for e in stored if e.epoch == 2)
    assert all(e.recorded_at <= second.started_at for e in stored if e.epoch == 1)


def test_restore_counters_survive_a_killed_driver(url: str) -> None:
    first = spawn("restore-failures", url)
    before = json.loads(read_line(first, "STATE"))
    assert (before["failures"], before["restore_failures"]) == (1, 2)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)

    second = spawn("resume", url)
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
    lines = out.splitlines()
    after = json.loads(lines[0].removeprefix("STATE "))
    assert after == before  # counters, checkpoints, last decision: all where they were
    decisions = [line.split(" ", 2)[1:] for line in lines[1:]]
    # restore_retry_num=3: the third restore failure is still a retry (Ray would have lost
    # the count of two and retried three more times); the fourth spends the failure budget.
    assert decisions[0][0] == Decision.RETRY_RESTORE.value
    assert json.loads(decisions[0][1]) == {
        "failures": 1, "restore_failures": 3, "total_restore_failures": 3, "preemptions": 0
    }  # fmt: skip
    assert decisions[1][0] == Decision.GIVE_UP.value
    assert json.loads(decisions[1][1])["failures"] == 2
    with EventStore.open(url, create=False) as store:
        sessions = store.list_sessions("restarts")
    assert [(s.epoch, s.clean_end) for s in sessions] == [(1, None), (2, True)]


OPEN_AND_RECORD = """
import sys
from statemachine import RetryPolicy, TrialAdded
from statemachine.log import ExperimentLog
with ExperimentLog.open(sys.argv[1], sys.argv[2], RetryPolicy()) as log:
    log.record("t1", TrialAdded())
"""


def test_drivers_racing_to_create_a_new_log(url: str) -> None:
    """Four drivers (of four experiments) open the same new database at once: the migration
    runs once, under its lock, and every driver records."""
    children = [
        subprocess.Popen(
            [sys.executable, "-c", OPEN_AND_RECORD, url, f"race{i}"],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]
    for child in children:
        _, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
    with EventStore.open(url, create=False) as store:
        assert [(e.name, e.trials) for e in store.list_experiments()] == [
            (f"race{i}", 1) for i in range(4)
        ]
        assert current_revision(store.engine) == head_revision()
