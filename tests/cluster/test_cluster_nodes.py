"""On a real multi-node cluster: where each attempt ran is recorded, a lost node shows up as
an actor death on that node, and restore retries avoid the node that failed (or fall back
within the bounded wait when no other node can take them).

Every test starts its own cluster (``local_cluster``): a head without CPUs and worker
raylets with 1 CPU each, one of them with a bad disk (``sm-test/disk: bad``) where the
trainable's ``load_checkpoint`` fails. A trial restores without a counted failure by being
paused once by the scheduler (``PauseOnce``); while it is paused, the good node is kept busy
by an idle actor, so the first restore lands on the bad node.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cluster_trainables import Steps, restores
from conftest import LocalCluster, local_cluster

from statemachine.domain.events import NodeAvoidanceDropped, NodesAvoided, TrialFailed
from statemachine.domain.failures import ActorError, RestoreError
from statemachine.domain.policy import RetryPolicy
from statemachine.domain.status import Status
from tests.tune.tune_trainables import PauseOnce
from tests.tune.tunekit import assert_log_matches_ray, stored_events

pytestmark = [pytest.mark.cluster, pytest.mark.ray, pytest.mark.slow]

#: Set to a file to collect the measured figures (docs/tune.md's "Clusters" section).
FIGURES_ENV = "STATEMACHINE_CLUSTER_FIGURES"


def fit(tmp_path: Path, name: str, config: dict[str, Any], policy: RetryPolicy | None, *,
        max_failures: int, url: str | None = None, scheduler: Any = None) -> Any:
    """Run one ``Steps`` trial with the event log callback; return the ResultGrid."""
    from ray import tune

    from statemachine.tune import CheckpointConfig, EventLogCallback, FailureConfig, RunConfig

    tuner = tune.Tuner(
        Steps,
        param_space=config,
        tune_config=tune.TuneConfig(scheduler=scheduler),
        run_config=RunConfig(
            name=name, storage_path=str(tmp_path / "results"), verbose=0,
            callbacks=[EventLogCallback(url, policy)],
            failure_config=FailureConfig(max_failures=max_failures),
            checkpoint_config=CheckpointConfig(checkpoint_frequency=1),
        ),
    )
    return tuner.fit()


def log_url(tmp_path: Path, name: str) -> str:
    return f"sqlite:///{tmp_path / 'results' / name / 'statemachine.db'}"


def when(condition: Callable[[], bool], then: Callable[[], None], timeout: float = 120) -> None:
    """In the background: once ``condition`` holds, do ``then`` (the test's hand on the
    cluster while Tune runs in the foreground)."""

    def watch() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                then()
                return
            time.sleep(0.05)

    threading.Thread(target=watch, daemon=True).start()


def node_names(cluster: LocalCluster, events: list[Any], kind: type) -> list[str | None]:
    """The worker names of the recorded nodes of ``kind`` events."""
    return [cluster.name_of(e.event.node.node_id if e.event.node else None)
            for e in events if isinstance(e.event, kind)]


def record(figure: dict[str, Any]) -> None:
    """Print a measured figure (``-s`` shows it) and append it to ``$FIGURES_ENV`` if set."""
    line = json.dumps(figure, sort_keys=True)
    print(f"figure: {line}")
    target = os.environ.get(FIGURES_ENV)
    if target:
        with open(target, "a", encoding="utf-8") as out:
            out.write(line + "\n")


def test_a_node_removed_under_a_training_trial_is_an_actor_death_on_that_node(
    tmp_path: Path,
) -> None:
    with local_cluster({"w1": {}, "w2": {}}) as cluster:
        ctl = tmp_path / "ctl"
        ctl.mkdir()
        victim: list[str] = []

        def started() -> bool:
            return any(ctl.glob("started-*"))

        def remove() -> None:
            name = next(ctl.glob("started-*")).read_text()
            victim.append(cluster.node_id(name))
            time.sleep(1.0)  # a checkpoint or two first
            cluster.remove(name)

        when(started, remove)
        grid = fit(tmp_path, "lost_node", {"ctl": str(ctl), "iters": 12, "sleep": 0.3}, None,
                   max_failures=1)
        url = log_url(tmp_path, "lost_node")
        states = assert_log_matches_ray(url, "lost_node", grid)
        (trial_id, state), = states.items()
        events = stored_events(url, "lost_node", trial_id)
        failures = [e.event for e in events if isinstance(e.event, TrialFailed)]
        assert len(failures) == 1 and isinstance(failures[0].error, ActorError)
        assert failures[0].node is not None and failures[0].node.node_id == victim[0]
        assert state.status is Status.TERMINATED and state.last_failure_node == failures[0].node
        starts = [e.event.node.node_id for e in events if e.type_name == "TrialStarted"]
        assert starts[0] == victim[0] and starts[-1] != victim[0]

        import contextlib
        import io

        from statemachine.cli.app import main

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(["--db", url, "nodes", "lost_node", "--json"]) == 0
        rows = json.loads(out.getvalue())
        lost = next(r for r in rows if r["node_id"] == victim[0])
        assert lost["actor_deaths"] + lost["preemptions"] == 1 and lost["attempts"] == 1


def bad_disk_run(tmp_path: Path, avoid: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """One trial on w1 (bad disk) and w2: it trains on w1 while w2 is busy, is paused, and
    its restore lands on w1 and fails; w2 is freed then. Returns what happened."""
    monkeypatch.setenv("TUNE_RESTORE_RETRY_NUM", "2")
    name = f"bad_disk_{'avoid' if avoid else 'ray'}"
    with local_cluster({"w1": {"disk": "bad"}, "w2": {}}) as cluster:
        ctl = tmp_path / "ctl"
        ctl.mkdir()
        blocker = cluster.block("w2")
        when(lambda: (ctl / "restore-1").exists(), lambda: cluster.unblock(blocker))
        policy = RetryPolicy(max_failures=1, restore_retry_num=2, avoid_failed_nodes=avoid)
        started = time.monotonic()
        grid = fit(tmp_path, name, {"ctl": str(ctl), "iters": 4}, policy, max_failures=1,
                   scheduler=PauseOnce(at=2))
        seconds = time.monotonic() - started
        url = log_url(tmp_path, name)
        states = assert_log_matches_ray(url, name, grid)
        (trial_id, state), = states.items()
        events = stored_events(url, name, trial_id)
        figure = {
            "scenario": "bad disk", "avoid_failed_nodes": avoid, "status": state.status.value,
            "restore_failures": state.total_restore_failures, "failures": state.failures,
            "restore_nodes": restores(ctl),
            "failed_on": node_names(cluster, events, TrialFailed),
            "avoided": [list(e.event.nodes) for e in events
                        if isinstance(e.event, NodesAvoided)],
            "seconds": round(seconds, 1),
        }
        figure["avoided"] = [[cluster.name_of(n) for n in nodes] for nodes in figure["avoided"]]
        record(figure)
        return figure


def test_with_avoid_failed_nodes_the_retry_restores_on_another_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    figure = bad_disk_run(tmp_path, True, monkeypatch)
    assert figure["restore_nodes"] == ["w1", "w2"]
    assert figure["failed_on"] == ["w1"] and figure["avoided"] == [["w1"]]
    assert (figure["status"], figure["restore_failures"], figure["failures"]) == (
        "TERMINATED", 1, 0)


def test_under_rays_own_placement_the_run_is_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the policy field Ray places the retry itself: the figures are recorded
    (docs/tune.md) and the log names every failing node; no exclusion is ever applied."""
    figure = bad_disk_run(tmp_path, False, monkeypatch)
    assert figure["avoided"] == []
    assert figure["restore_nodes"][0] == "w1"
    # every failed restore ran on the bad node (as the log says), every other one elsewhere
    assert figure["failed_on"] == ["w1"] * figure["restore_failures"]
    assert figure["restore_failures"] == figure["restore_nodes"].count("w1") >= 1


@pytest.mark.parametrize("how", ["removed", "busy"])
def test_when_no_other_node_can_take_the_retry_the_exclusion_is_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """The only other node is removed (dropped at once: ``no_other_node``) or stays busy
    (dropped after the bounded wait: ``timeout``): the retries run on the bad node and the
    trial gives up by the policy, and the log says why."""
    monkeypatch.setenv("TUNE_RESTORE_RETRY_NUM", "2")
    name = f"fallback_{how}"
    wait_s = 2 if how == "busy" else 60  # removed: dropped as soon as Ray declares it dead
    with local_cluster({"w1": {"disk": "bad"}, "w2": {}}) as cluster:
        ctl = tmp_path / "ctl"
        ctl.mkdir()
        cluster.block("w2")
        if how == "removed":
            when(lambda: (ctl / "restore-1").exists(), lambda: cluster.remove("w2"))
        policy = RetryPolicy(max_failures=0, restore_retry_num=2, avoid_failed_nodes=True,
                             avoid_nodes_wait_s=wait_s)
        started = time.monotonic()
        grid = fit(tmp_path, name, {"ctl": str(ctl), "iters": 4}, policy, max_failures=0,
                   scheduler=PauseOnce(at=2))
        seconds = time.monotonic() - started
        url = log_url(tmp_path, name)
        states = assert_log_matches_ray(url, name, grid)
        (trial_id, state), = states.items()
        events = stored_events(url, name, trial_id)
        drops = [e.event for e in events if isinstance(e.event, NodeAvoidanceDropped)]
        failed = [e.event for e in events if isinstance(e.event, TrialFailed)]
        assert restores(ctl) == ["w1", "w1", "w1"]
        assert all(isinstance(f.error, RestoreError) for f in failed) and len(failed) == 3
        assert state.status is Status.ERROR and state.total_restore_failures == 3
        reason = "no_other_node" if how == "removed" else "timeout"
        assert [d.reason for d in drops] == [reason, reason]
        assert all(d.nodes == (cluster_node_id(events),) for d in drops)
        waited = [d.waited_ms or 0 for d in drops]
        if how == "busy":
            assert all(wait_s * 1000 <= w < (wait_s + 5) * 1000 for w in waited), waited
        else:
            assert all(w < 20_000 for w in waited), waited
        record({"scenario": f"fallback ({how})", "status": state.status.value,
                "restore_failures": state.total_restore_failures,
                "reasons": [d.reason for d in drops], "waited_ms": waited,
                "restore_nodes": restores(ctl), "seconds": round(seconds, 1)})

        from statemachine.cli.explain import explain_trial

        text = " ".join(s.text for s in explain_trial(
            trial_id, [(e, e.event) for e in events]).steps)
        assert "no other node could host it" in text


def cluster_node_id(events: list[Any]) -> str:
    """The node id of the first recorded restore failure."""
    first = next(e.event for e in events if isinstance(e.event, TrialFailed))
    assert first.node is not None and first.node.node_id
    return first.node.node_id
