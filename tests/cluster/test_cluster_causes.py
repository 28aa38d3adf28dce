"""Why the actor died, from Ray itself, on a real multi-node cluster: a preemption drill, a
node lost without a drain, a worker process killed.

Each scenario runs one ``Steps`` trial twice on its own cluster (a head without CPUs, two
1-CPU workers): first with plain Ray (no callback), then with ``EventLogCallback`` under
Ray's default policy; the same hand hits the node (or process) the trial runs on in both
runs. What each run ended with is printed as a ``figure:`` line beside the cause and the
decision the log recorded (docs/tune.md's table of causes on a cluster).

- preemption: the node is drained through Ray's GCS with the reason preemption and a
  deadline, then killed after the deadline (by ``trial-replay drill preempt`` in the second
  run: the drill's test on a real cluster); Ray raises ``ActorDiedError(preempted=True)``;
  the log says ``preempted`` on that node, decided under the preemption budget (not counted);
- a node removed without a drain: ``node_died`` (from the exception, or learned late from
  Ray's GCS when the exception said nothing), counted;
- the trial's worker process SIGKILLed by its pid: ``worker_crashed``, counted.

An OOM kill is not provoked here: Ray's memory monitor reads the whole machine's memory (or
its cgroup's), not a test cluster's, so lowering its threshold for this cluster kills by the
machine's usage, which the other processes of a shared machine decide (flaky, and it may
kill workers of other runs' clusters alike). The OOM mapping is tested from Ray's real
exception objects (tests/tune/test_tune_causes.py, tests/domain/test_domain_ray_causes.py).
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cluster_trainables import Steps
from conftest import LocalCluster, local_cluster
from test_cluster_nodes import log_url, record, when

from statemachine.domain.death import DeathCause
from statemachine.domain.events import DeathCauseLearned, TrialFailed
from statemachine.domain.failures import ActorError
from tests.tune.tunekit import assert_log_matches_ray, ray_trials, stored_events

pytestmark = [pytest.mark.cluster, pytest.mark.ray, pytest.mark.slow]

CONFIG = {"iters": 14, "sleep": 0.4}


def fit(tmp_path: Path, name: str, ctl: Path, with_callback: bool) -> Any:
    """One ``Steps`` trial, ``max_failures=1``; with the event log callback or without."""
    from ray import tune

    from statemachine.tune import CheckpointConfig, EventLogCallback, FailureConfig, RunConfig

    callbacks = [EventLogCallback(log_url(tmp_path, name))] if with_callback else []
    return tune.Tuner(
        Steps, param_space={**CONFIG, "ctl": str(ctl)},
        run_config=RunConfig(
            name=name, storage_path=str(tmp_path / "results"), verbose=0, callbacks=callbacks,
            failure_config=FailureConfig(max_failures=1),
            checkpoint_config=CheckpointConfig(checkpoint_frequency=1)),
    ).fit()


def first_start(ctl: Path) -> tuple[str, int]:
    """The node name and pid of the trial's first actor."""
    first = min(ctl.glob("started-*"), key=lambda p: p.stat().st_mtime)
    return first.read_text(), int(first.name.split("-")[1])


def run_both(tmp_path: Path, cluster: LocalCluster, scenario: str,
             hit: Callable[[LocalCluster, str, int, bool], None]) -> dict[str, Any]:
    """Run the scenario without, then with the callback; ``hit(cluster, node name, pid,
    with_callback)`` is done to the trial's first actor in each. Returns both outcomes."""
    outcome: dict[str, Any] = {"scenario": scenario}
    for with_callback in (False, True):
        ctl = tmp_path / f"ctl-{int(with_callback)}"
        ctl.mkdir()
        victim: dict[str, Any] = {}

        def act(ctl: Path = ctl, victim: dict[str, Any] = victim,
                with_callback: bool = with_callback) -> None:
            name, pid = first_start(ctl)
            victim.update(name=name, node_id=cluster.node_id(name), pid=pid)
            time.sleep(1.5)  # a few results and checkpoints first
            hit(cluster, name, pid, with_callback)

        when(lambda ctl=ctl: any(ctl.glob("started-*")), act)  # type: ignore[misc]
        name = f"{scenario}_{'ours' if with_callback else 'ray'}"
        grid = fit(tmp_path, name, ctl, with_callback)
        (status, failures), = ray_trials(grid).values()
        run = {"status": status, "num_failures": failures,
               "starts": len(list(ctl.glob("started-*"))), "victim": victim}
        if with_callback:
            run.update(ours(tmp_path, name, grid, victim["node_id"]))
        outcome["ours" if with_callback else "ray"] = run
        if scenario != "worker_crashed":  # the node is gone: another takes its place
            cluster.add(f"{victim['name']}b")
    record({"scenario": scenario,
            "ray": [outcome["ray"][k] for k in ("status", "num_failures")],
            "ours": [outcome["ours"][k] for k in ("status", "num_failures", "cause",
                                                   "decision", "iteration", "learned_from")]})
    return outcome


def ours(tmp_path: Path, name: str, grid: Any, victim_node: str) -> dict[str, Any]:
    """What the log says of the run with the callback: its one actor failure."""
    url = log_url(tmp_path, name)
    states = assert_log_matches_ray(url, name, grid)  # Ray's status and count, replayed
    (trial_id, state), = states.items()
    events = stored_events(url, name, trial_id)
    failed = [e for e in events if isinstance(e.event, TrialFailed)]
    assert len(failed) == 1, [e.type_name for e in events]
    event = failed[0].event
    assert isinstance(event.error, ActorError), event.error
    assert event.node is not None and event.node.node_id == victim_node
    learned = [e.event for e in events if isinstance(e.event, DeathCauseLearned)]
    cause = event.error.cause
    if learned:  # the exception said nothing: Ray's GCS told later, about this very failure
        assert cause is DeathCause.UNKNOWN and len(learned) == 1
        assert learned[0].failure_seq == failed[0].seq
        cause = learned[0].death.cause
    return {"cause": cause.value, "decision": failed[0].decision,
            "iteration": event.iteration, "learned_from": learned[0].source if learned else None,
            "preemptions": state.preemptions, "failures": state.failures,
            "ray_reason": (learned[0].death if learned else event.error.death).ray_reason,
            "node_message": (learned[0].death if learned else event.error.death).node_message,
            "trial_status": state.status}


def nodes_json(url: str, name: str) -> list[dict[str, Any]]:
    from statemachine.cli.app import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["--db", url, "nodes", name, "--json"]) == 0
    import json

    return list(json.loads(out.getvalue()))


# ---------------------------------------------------------------- the scenarios


def drain_and_remove(cluster: LocalCluster, name: str, pid: int, with_callback: bool) -> None:
    """Preempt the node: drain it for preemption, kill it after the deadline. Plain Ray's run:
    as Ray's test_draining.py does (GcsClient.drain_node, then Cluster.remove_node); ours: the
    user's drill, ``trial-replay drill preempt``."""
    node_id = cluster.node_id(name)
    if with_callback:
        from statemachine.cli.app import main

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["drill", "preempt", node_id, "--address", cluster.address,
                         "--deadline-s", "1.5", "--message", "spot reclaimed (test)"])
        assert code == 0, out.getvalue()
        assert "Killed raylet pid" in out.getvalue(), out.getvalue()
        return
    from statemachine.tune.ray_surface.deaths import drain_node

    accepted, rejection = drain_node(cluster.address, node_id, "spot reclaimed (test)",
                                     int(time.time() * 1000) + 1500)
    assert accepted, rejection
    time.sleep(2.0)
    cluster.remove(name)


def test_a_preemption_drill_is_preempted_on_that_node_and_not_counted(tmp_path: Path) -> None:
    with local_cluster({"w1": {}, "w2": {}}) as cluster:
        outcome = run_both(tmp_path, cluster, "preempted", drain_and_remove)
    ray_run, ours_run = outcome["ray"], outcome["ours"]
    assert ours_run["cause"] == "preempted", ours_run
    if ours_run["ray_reason"] != "preempted":  # Ray 2.40 may raise the flag without words
        assert ours_run["ray_reason"] == "NODE_DIED/AUTOSCALER_DRAIN_PREEMPTED"
        assert ours_run["node_message"] == "spot reclaimed (test)"
    assert ours_run["decision"] == "RECOVER_PREEMPTED"
    assert (ours_run["preemptions"], ours_run["failures"]) == (1, 0)  # not in max_failures
    assert ours_run["iteration"] >= 1  # it had trained when its node was taken
    # ends where plain Ray ends: finished, no failure counted (Ray does not count one either)
    assert (ray_run["status"], ray_run["num_failures"]) == ("TERMINATED", 0)
    assert (ours_run["status"], ours_run["num_failures"]) == ("TERMINATED", 0)
    rows = nodes_json(log_url(tmp_path, "preempted_ours"), "preempted_ours")
    lost = next(r for r in rows if r["node_id"] == ours_run["victim"]["node_id"])
    assert "causes" not in lost and lost["preemptions"] == 1  # its own column


def remove(cluster: LocalCluster, name: str, pid: int, with_callback: bool) -> None:
    cluster.remove(name)


def test_a_node_removed_without_a_drain_is_node_died_and_counted(tmp_path: Path) -> None:
    with local_cluster({"w1": {}, "w2": {}}) as cluster:
        outcome = run_both(tmp_path, cluster, "node_died", remove)
    ray_run, ours_run = outcome["ray"], outcome["ours"]
    assert ours_run["cause"] == "node_died", ours_run
    assert ours_run["ray_reason"].startswith("NODE_DIED")
    assert ours_run["decision"] == "RECOVER" and ours_run["failures"] == 1
    assert (ray_run["status"], ray_run["num_failures"]) == ("TERMINATED", 1)
    assert (ours_run["status"], ours_run["num_failures"]) == ("TERMINATED", 1)
    rows = nodes_json(log_url(tmp_path, "node_died_ours"), "node_died_ours")
    lost = next(r for r in rows if r["node_id"] == ours_run["victim"]["node_id"])
    assert lost["causes"] == {"node_died": 1}


def kill_worker(cluster: LocalCluster, name: str, pid: int, with_callback: bool) -> None:
    os.kill(pid, signal.SIGKILL)  # the trial's own worker process, by its pid


def test_a_worker_process_killed_is_worker_crashed_and_counted(tmp_path: Path) -> None:
    with local_cluster({"w1": {}, "w2": {}}) as cluster:
        outcome = run_both(tmp_path, cluster, "worker_crashed", kill_worker)
    ray_run, ours_run = outcome["ray"], outcome["ours"]
    assert ours_run["cause"] == "worker_crashed", ours_run
    assert ours_run["ray_reason"].startswith("WORKER_DIED")
    assert ours_run["decision"] == "RECOVER" and ours_run["failures"] == 1
    assert (ray_run["status"], ray_run["num_failures"]) == ("TERMINATED", 1)
    assert (ours_run["status"], ours_run["num_failures"]) == ("TERMINATED", 1)
