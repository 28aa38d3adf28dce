"""The cluster scenario with the log in PostgreSQL, the driver on the head node SIGKILLed in
the middle and continued with ``Tuner.restore``: the counters and the exclusion of the node
that failed survive in the log, and the retry still lands on another node."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cluster_trainables import restores
from conftest import HERE, local_cluster, worker_pythonpath

from statemachine.domain.events import NodesAvoided, TrialFailed
from statemachine.domain.status import Status
from tests.tune.tunekit import replay, stored_events

pytestmark = [pytest.mark.cluster, pytest.mark.ray, pytest.mark.slow, pytest.mark.postgres]

DRIVER = HERE / "cluster_driver.py"


def start_driver(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    """A driver in its own session (the test kills its whole process group)."""
    env = {**os.environ, "PYTHONPATH": worker_pythonpath(), "TUNE_RESTORE_RETRY_NUM": "2",
           "TUNE_GLOBAL_CHECKPOINT_S": "0", "RAY_DEDUP_LOGS": "0"}
    env.pop("STATEMACHINE_DB_URL", None)
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, str(DRIVER), *args], stdout=out,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the driver's process group (it started it: its pid is the group's id)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def wait_for(condition: object, what: str, log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"{what} never happened:\n{log.read_text()[-4000:]}"
        time.sleep(0.2)


def test_exclusion_and_counters_survive_a_driver_sigkill_on_the_cluster(
    tmp_path: Path, pg_url: str
) -> None:
    name = "pg_crash"
    with local_cluster({"w1": {"disk": "bad"}, "w2": {}}) as cluster:
        ctl = tmp_path / "ctl"
        ctl.mkdir()
        storage, out, log = tmp_path / "results", tmp_path / "result.json", tmp_path / "d.log"
        blocker = cluster.block("w2")
        args = [cluster.address, str(storage), name, str(ctl), pg_url, str(out)]

        first = start_driver(["fit", *args], log)
        try:
            def avoided() -> bool:
                assert first.poll() is None, f"driver ended early:\n{log.read_text()[-4000:]}"
                states = replay(pg_url, name) if (ctl / "restore-1").exists() else {}
                return any(s.excluded_nodes for s in states.values())

            wait_for(avoided, "the exclusion of the bad node", log)
            time.sleep(1.0)  # the retry now waits for w2, which is busy
        finally:
            kill_group(first)
        (before,) = replay(pg_url, name).values()
        assert before.excluded_nodes == (cluster.node_id("w1"),)
        assert (before.restore_failures, before.failures) == (1, 0)
        assert restores(ctl) == ["w1"]

        second = start_driver(["restore", *args], log)
        try:
            wait_for(lambda: "still avoids node(s)" in log.read_text(),
                     "the restored driver's exclusion", log)
            time.sleep(2.0)
            # w1 has a free CPU all along: without the exclusion the retry would be there
            assert restores(ctl) == ["w1"], "the retry ran while its only allowed node was busy"
            cluster.unblock(blocker)
            second.wait(timeout=180)
        finally:
            kill_group(second)
        assert out.exists(), f"the restored driver wrote no result:\n{log.read_text()[-4000:]}"

        (trial_id, state), = replay(pg_url, name).items()
        events = stored_events(pg_url, name, trial_id)
        assert restores(ctl) == ["w1", "w2"]
        assert state.status is Status.TERMINATED
        assert (state.total_restore_failures, state.failures, state.excluded_nodes) == (1, 0, ())
        assert {e.epoch for e in events} == {1, 2}
        avoided_in = [e.epoch for e in events if isinstance(e.event, NodesAvoided)]
        assert avoided_in == [1]
        failed = [e.event for e in events if isinstance(e.event, TrialFailed)]
        assert [f.node.node_id for f in failed if f.node] == [cluster.node_id("w1")]
