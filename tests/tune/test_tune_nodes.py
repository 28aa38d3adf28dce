"""On one Ray node: every start and failure records the node, and ``avoid_failed_nodes``
never hangs a retry (no other node exists: the exclusion is dropped at once, or the installed
Ray cannot express it and says so once) and never changes a decision."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from test_tune_runs import db_url, fit, only_trial

from statemachine.domain.events import NodeAvoidanceDropped, TrialFailed, TrialStarted
from statemachine.domain.policy import RetryPolicy
from statemachine.tune.compat import selector_support
from statemachine.tune.ray_surface import placement
from tests.tune.tunekit import assert_log_matches_ray, stored_events

pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture
def ctl(tmp_path: Path) -> Path:
    folder = tmp_path / "ctl"
    folder.mkdir()
    return folder


@pytest.mark.parametrize("avoid", [False, True])
def test_nodes_are_recorded_and_avoidance_on_one_node_falls_back_at_once(
    ray_cluster: None, tmp_path: Path, ctl: Path, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture, avoid: bool,
) -> None:
    import ray

    from statemachine.tune import EventLogCallback

    monkeypatch.setenv("TUNE_RESTORE_RETRY_NUM", "2")
    (ctl / "fail-restores").write_text("2")
    policy = RetryPolicy(max_failures=1, restore_retry_num=2, avoid_failed_nodes=avoid)
    name = f"one_node_{avoid}"
    with caplog.at_level(logging.WARNING, logger="statemachine"):
        grid = fit(tmp_path, name, {"ctl": str(ctl), "iters": 4, "fail_at": 2},
                   EventLogCallback(None, policy), max_failures=1)
    trial = only_trial(grid)
    assert (trial.status, trial.num_failures) == ("TERMINATED", 1)  # as without the field
    url = db_url(tmp_path, name)
    assert_log_matches_ray(url, name, grid)
    events = [e.event for e in stored_events(url, name, trial.trial_id)]

    (node_id,) = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    placed = [e.node for e in events if isinstance(e, (TrialStarted, TrialFailed))]
    assert len(placed) == 7  # 4 starts, 3 failures: each knows its node
    assert {n.node_id for n in placed if n} == {node_id}
    assert all(n is not None and n.node_ip and n.hostname for n in placed)

    drops = [e for e in events if isinstance(e, NodeAvoidanceDropped)]
    if not avoid:
        assert drops == []
        return
    support = selector_support()
    reason = "no_other_node" if support is None else "unsupported"
    assert [(d.reason, d.nodes) for d in drops] == [(reason, (node_id,))] * 2
    if support is not None:  # an older Ray: said once, with the version it needs
        said = [r.getMessage() for r in caplog.records if "cannot be applied" in r.getMessage()]
        assert len(said) <= 1 and "2.49" in support


@pytest.mark.skipif(selector_support() is not None,
                    reason="the installed Ray has no placement group label selectors (< 2.49)")
def test_selectors_exclude_nodes_and_come_off_again() -> None:
    from ray.tune.execution.placement_groups import PlacementGroupFactory
    own = PlacementGroupFactory([{}, {"CPU": 1}], "SPREAD",
                                bundle_label_selector=[{"zone": "a"}])
    excluded = placement.with_exclusion(own, ["n1", "n2"])
    assert excluded is not None and excluded != own
    assert excluded.bundles == own.bundles and excluded.head_bundle_is_empty
    assert excluded.strategy == "SPREAD"
    assert excluded._kwargs["bundle_label_selector"] == [
        {"zone": "a", "ray.io/node-id": "!in(n1,n2)"}]
    assert placement.excluded_by(excluded) == ("n1", "n2")
    assert placement.without_exclusion(excluded) == own
    assert placement.with_exclusion(excluded, ["n3"])._kwargs["bundle_label_selector"] == [
        {"zone": "a", "ray.io/node-id": "!in(n3)"}]
    plain = PlacementGroupFactory([{"CPU": 1}])
    assert placement.without_exclusion(plain) is plain and placement.excluded_by(plain) == ()
    mine = PlacementGroupFactory([{"CPU": 1}], bundle_label_selector=[{"ray.io/node-id": "x"}])
    assert placement.with_exclusion(mine, ["n1"]) is None  # the user's own choice stands


def test_an_older_ray_is_told_which_version_places_by_node_label() -> None:
    said = selector_support("2.40.0")
    assert said is not None and "ray 2.40.0" in said and ">= 2.49" in said
    if selector_support() is None:  # this Ray's placement_group takes selectors
        assert selector_support("2.49.0") is None
