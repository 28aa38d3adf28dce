"""Where attempts ran: node fields of events (both schema versions), the exclusion of failed
nodes in the fold, and the per-node tally."""

from __future__ import annotations

from typing import Any

import pytest
from domain_strategies import PROPERTY, event_step, policies
from hypothesis import given
from hypothesis import strategies as st

from statemachine import (
    CheckpointSaved,
    Decision,
    EventDecodeError,
    NodeAvoidanceDropped,
    NodeRef,
    NodesAvoided,
    PolicySet,
    RestoreSucceeded,
    RetryPolicy,
    Status,
    TrialAdded,
    TrialCompleted,
    TrialFailed,
    TrialReset,
    TrialStarted,
    TrialState,
    apply,
    decode_event,
    encode_event,
    fold,
    tally_nodes,
)
from statemachine.domain.failures import ActorError, RestoreError, TrainingError

A = NodeRef("a" * 56, "10.0.0.7", "host-a")
B = NodeRef("b" * 56, "10.0.0.8", "host-b")
AVOID = RetryPolicy(restore_retry_num=2, max_failures=1, avoid_failed_nodes=True)


def restore_failed(node: NodeRef | None) -> TrialFailed:
    return TrialFailed(RestoreError("builtins.OSError", "bad disk"), node=node)


def restoring(policy: RetryPolicy) -> TrialState:
    state, _ = fold("t", [TrialAdded(), PolicySet(policy), CheckpointSaved("ck1"),
                          TrialStarted(restore_from="ck1", node=A)])
    assert state.status is Status.RESTORING
    return state


# ---------------------------------------------------------------- schema versions


@pytest.mark.parametrize("type_name", ["TrialStarted", "TrialFailed"])
def test_version_2_of_start_and_failure_carries_the_node(type_name: str) -> None:
    # (TrialFailed is at version 3 since, which kept the node: tests/domain/test_domain_causes.py)
    event = (TrialStarted(restore_from="ck", node=A) if type_name == "TrialStarted"
             else restore_failed(A))
    name, version, payload = encode_event(event)
    assert (name, version) == (type_name, 2 if type_name == "TrialStarted" else 3)
    assert payload["node"] == {"node_id": "a" * 56, "node_ip": "10.0.0.7",
                               "hostname": "host-a"}
    assert decode_event(name, version, payload) == event


def test_a_version_1_payload_without_a_node_still_decodes() -> None:
    started = decode_event("TrialStarted", 1, {"restore_from": "ck"})
    failed = decode_event("TrialFailed", 1, {"error": RestoreError("x.Y", "m").to_dict()})
    assert started == TrialStarted(restore_from="ck") and started.node is None
    assert isinstance(failed, TrialFailed) and failed.node is None
    assert failed.error.cause_type == "x.Y"


def test_a_partly_known_node_keeps_its_unknown_fields_null() -> None:
    event = decode_event("TrialFailed", 2, {
        "error": TrainingError("x.Y", "m").to_dict(),
        "node": {"node_id": None, "node_ip": "10.0.0.7", "hostname": None},
    })
    assert isinstance(event, TrialFailed)
    assert event.node == NodeRef(node_ip="10.0.0.7")
    assert event.node.describe() == "node 10.0.0.7"


@pytest.mark.parametrize(("version", "payload", "words"), [
    (1, {"restore_from": None, "node": A.to_dict()}, "later version: node"),
    (2, {"node": {"node_id": 7}}, "node_id"),
    (2, {"node": {"node_id": "a", "rack": "r1"}}, "rack"),
    (2, {"node": "10.0.0.7"}, "node"),
    (3, {"node": None}, "version 3"),
])
def test_malformed_node_payloads_are_refused(version: int, payload: dict[str, Any],
                                             words: str) -> None:
    with pytest.raises(EventDecodeError, match=words):
        decode_event("TrialStarted", version, payload)


def test_old_snapshots_without_node_fields_decode() -> None:
    data = TrialState("t").to_dict()
    del data["last_failure_node"], data["excluded_nodes"]
    state = TrialState.from_dict(data)
    assert state.last_failure_node is None and state.excluded_nodes == ()


def test_a_state_with_nodes_round_trips_through_its_snapshot_form() -> None:
    state = restoring(AVOID)
    apply(state, restore_failed(A))
    again = TrialState.from_dict(state.to_dict())
    assert again == state
    assert again.excluded_nodes == ("a" * 56,) and again.last_failure_node == A


# ---------------------------------------------------------------- the exclusion in the fold


def test_the_default_policy_excludes_nothing() -> None:
    state = restoring(RetryPolicy(restore_retry_num=2))
    record = apply(state, restore_failed(A))
    assert record.decision is Decision.RETRY_RESTORE
    assert state.excluded_nodes == () and state.last_failure_node == A


def test_each_restore_failure_of_the_episode_excludes_its_node() -> None:
    state = restoring(AVOID)
    assert apply(state, restore_failed(A)).decision is Decision.RETRY_RESTORE
    assert state.excluded_nodes == ("a" * 56,)
    apply(state, TrialStarted(restore_from="ck1", node=B))
    apply(state, restore_failed(B))
    assert state.excluded_nodes == ("a" * 56, "b" * 56)
    apply(state, TrialStarted(restore_from="ck1", node=A))
    # retries spent: RECOVER restores the same checkpoint again, still avoiding both
    assert apply(state, restore_failed(A)).decision is Decision.RECOVER
    assert state.excluded_nodes == ("a" * 56, "b" * 56)


def test_a_failure_on_an_unknown_node_excludes_nothing() -> None:
    state = restoring(AVOID)
    apply(state, restore_failed(NodeRef(node_ip="10.0.0.7")))
    assert state.excluded_nodes == ()


@pytest.mark.parametrize("ending", ["restored", "dropped", "new_checkpoint", "reset"])
def test_the_exclusion_ends_with_its_episode_or_a_fallback(ending: str) -> None:
    policy = AVOID.replace(max_failures=0, restore_retry_num=1)
    state = restoring(policy)
    apply(state, restore_failed(A))
    assert state.excluded_nodes
    if ending == "restored":
        apply(state, TrialStarted(restore_from="ck1", node=B))
        apply(state, RestoreSucceeded())
    elif ending == "dropped":
        apply(state, NodeAvoidanceDropped(nodes=("a" * 56,), reason="timeout", waited_ms=5))
        assert state.status is Status.PENDING
    elif ending == "new_checkpoint":
        apply(state, TrialStarted(restore_from="ck0", node=B))
        assert state.status is Status.RESTORING and state.restore_failures == 0
    else:
        apply(state, TrialStarted(restore_from="ck1", node=A))
        assert apply(state, restore_failed(A)).status_after is Status.ERROR
        apply(state, TrialReset())
    assert state.excluded_nodes == ()


def test_nodes_avoided_is_a_record_that_changes_nothing() -> None:
    state = restoring(AVOID)
    apply(state, restore_failed(A))
    before = state.copy()
    record = apply(state, NodesAvoided(nodes=("a" * 56,)))
    assert record.status_before is record.status_after is Status.PENDING
    before.seq += 1
    assert state == before


@PROPERTY
@given(data=st.data(), policy=policies, length=st.integers(1, 30))
def test_avoiding_nodes_never_changes_a_decision_or_a_counter(
    data: st.DataObject, policy: RetryPolicy, length: int
) -> None:
    """The exclusion is placement only: statuses, decisions and counters are the same."""
    plain = TrialState("t", policy=policy.replace(avoid_failed_nodes=False))
    avoiding = TrialState("t", policy=policy.replace(avoid_failed_nodes=True))
    for _ in range(length):
        event = event_step(data, plain.status)
        if isinstance(event, PolicySet):
            continue  # a policy event would replace the two policies under comparison
        try:
            first = apply(plain, event)
        except Exception as exc:  # invalid in this state: invalid in both
            with pytest.raises(type(exc)):
                apply(avoiding, event)
            continue
        second = apply(avoiding, event)
        assert (first.status_after, first.decision, first.counters) == (
            second.status_after, second.decision, second.counters)
        assert plain.excluded_nodes == ()


# ---------------------------------------------------------------- the tally


def test_nodes_are_tallied_worst_first() -> None:
    only_id = NodeRef(node_id="a" * 56)
    policy = PolicySet(RetryPolicy(max_failures=3, restore_retry_num=1))
    events = [
        ("t1", TrialAdded()), ("t1", policy),
        ("t1", TrialStarted(node=B)), ("t1", CheckpointSaved("ck")),
        ("t1", TrialFailed(TrainingError("x.Y", "m"), node=B)),
        ("t1", TrialStarted(node=only_id)),
        ("t1", restore_failed(only_id)),
        ("t2", TrialAdded()), ("t2", policy), ("t2", CheckpointSaved("ck")),
        ("t2", TrialStarted(restore_from="ck", node=A)),
        ("t2", restore_failed(A)),
        ("t2", TrialStarted(node=B)),
        ("t2", TrialFailed(ActorError("ray.exceptions.ActorDiedError", "m", preempted=True),
                           node=B)),
        ("t3", TrialAdded()), ("t3", TrialStarted()), ("t3", TrialFailed(
            ActorError("ray.exceptions.ActorDiedError", "m"), node=NodeRef(node_ip="10.0.0.7"))),
        ("t3", TrialCompleted()),  # does not fold (t3 is ERROR): not counted, nor after it
        ("t3", TrialStarted(node=A)),
    ]
    tallies = tally_nodes(events)
    assert [t.node for t in tallies] == [A, B, NodeRef(node_ip="10.0.0.7"), NodeRef()]
    worst = tallies[0]
    assert (worst.attempts, worst.restore_attempts, worst.restore_failures,
            worst.trials) == (2, 2, 2, {"t1", "t2"})
    assert (tallies[1].training_failures, tallies[1].preemptions, tallies[1].attempts,
            tallies[1].restore_attempts) == (1, 1, 2, 1)
    assert (tallies[2].actor_deaths, tallies[2].attempts) == (1, 0)
    assert tallies[3].node.key == "unknown" and tallies[3].attempts == 1
