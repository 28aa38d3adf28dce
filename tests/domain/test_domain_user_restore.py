"""A restore that fails in the user's own code (function trainables): ``restoring()`` and
``RetryPolicy(restore_phase="until_first_report")`` route it through the restore rules."""

from __future__ import annotations

from typing import Any

import pytest
from domain_strategies import (
    PROPERTY,
    actor_error,
    event_step,
    failures,
    policies,
    restore_error,
    training_error,
)
from hypothesis import given
from hypothesis import strategies as st

from statemachine.domain.events import (
    CheckpointSaved,
    Event,
    FirstResult,
    PolicySet,
    RestoreSucceeded,
    TrialAdded,
    TrialFailed,
    TrialResumed,
    TrialStarted,
    decode_event,
    encode_event,
)
from statemachine.domain.failures import RestoreError
from statemachine.domain.machine import apply, fold
from statemachine.domain.policy import ExhaustionAction, RestorePhase, RetryPolicy
from statemachine.domain.state import TrialState
from statemachine.domain.status import Decision, Status
from statemachine.exceptions import EventDecodeError, InvalidTransitionError, PolicyError

FIRST_REPORT = RestorePhase.UNTIL_FIRST_REPORT


def _policy(**changes: object) -> RetryPolicy:
    return RetryPolicy(**{"max_failures": 1, "restore_retry_num": 2, **changes})  # type: ignore[arg-type]


def _restarted(policy: RetryPolicy) -> TrialState:
    """Checkpointed, failed once in training, restarted from ``c1``: Ray's restore returned."""
    state, _ = fold("t", [PolicySet(policy), TrialAdded(), TrialStarted(), CheckpointSaved("c1"),
                          training_error(), TrialStarted(restore_from="c1"),
                          RestoreSucceeded()])
    assert (state.status, state.failures, state.restore_failures) == (Status.RUNNING, 1, 0)
    return state


def _attempt(state: TrialState, failure: TrialFailed) -> Decision | None:
    record = apply(state, failure)
    if record.status_after is Status.PENDING:
        apply(state, TrialStarted(restore_from="c1"))
        apply(state, RestoreSucceeded())
    return record.decision


def test_restoring_failures_are_restore_retries_then_the_restore_works() -> None:
    state = _restarted(_policy())
    assert _attempt(state, restore_error()) is Decision.RETRY_RESTORE
    assert _attempt(state, restore_error()) is Decision.RETRY_RESTORE
    assert (state.failures, state.total_restore_failures) == (1, 2)
    apply(state, FirstResult(iteration=2))
    assert state.unconfirmed_restore is None
    # A genuine training bug after the restore worked is a training failure.
    record = apply(state, training_error())
    assert record.decision is Decision.GIVE_UP
    assert (state.failures, state.total_restore_failures) == (2, 2)


def test_the_counter_refers_to_the_episode_across_rays_own_success() -> None:
    state = _restarted(_policy())
    assert apply(state, restore_error()).counters.restore_failures == 1
    apply(state, TrialStarted(restore_from="c1"))
    apply(state, RestoreSucceeded())
    assert state.restore_failures == 0  # as Ray's counter after its own on_restore
    record = apply(state, restore_error())
    assert record.counters.restore_failures == 2
    # Retries spent: counted against max_failures (Ray's retry_checkpoint): 2 > 1, ERROR.
    apply(state, TrialStarted(restore_from="c1"))
    apply(state, RestoreSucceeded())
    record = apply(state, restore_error())
    assert record.decision is Decision.GIVE_UP
    assert record.counters.failures == 2


def test_default_policy_without_restoring_is_rays_a_training_failure() -> None:
    state = _restarted(_policy())
    record = apply(state, training_error("builtins.OSError"))
    assert record.decision is Decision.GIVE_UP
    assert record.counters.failures == 2


def test_until_first_report_makes_any_failure_before_the_first_result_a_restore_one() -> None:
    state = _restarted(_policy(restore_phase="until_first_report"))
    assert _attempt(state, training_error("builtins.OSError")) is Decision.RETRY_RESTORE
    assert _attempt(state, actor_error()) is Decision.RETRY_RESTORE
    apply(state, FirstResult(iteration=2))
    assert apply(state, training_error()).decision is Decision.GIVE_UP


def test_until_first_report_needs_a_restore_a_fresh_start_fails_in_training() -> None:
    state, records = fold("t", [PolicySet(_policy(restore_phase=FIRST_REPORT)), TrialAdded(),
                                TrialStarted(), training_error()])
    assert records[-1].decision is Decision.RECOVER
    assert state.restore_failures == 0 and state.failures == 1


def test_a_restore_error_after_the_first_result_is_a_training_failure() -> None:
    state = _restarted(_policy())
    apply(state, FirstResult(iteration=1))
    record = apply(state, restore_error())
    assert record.decision is Decision.GIVE_UP and record.counters.failures == 2


def test_a_training_failure_outside_the_block_confirms_the_restore() -> None:
    state = _restarted(_policy(max_failures=3))
    apply(state, restore_error())
    apply(state, TrialStarted(restore_from="c1"))
    apply(state, RestoreSucceeded())
    record = apply(state, training_error())  # the block exited normally, then a bug
    assert record.decision is Decision.RECOVER
    assert state.unconfirmed_restore is None and state.failures == 2
    apply(state, TrialStarted(restore_from="c1"))
    apply(state, RestoreSucceeded())
    assert apply(state, restore_error()).counters.restore_failures == 1  # a new episode


@pytest.mark.parametrize("action, decision, checkpoints", [
    (ExhaustionAction.RESTART_FROM_SCRATCH, Decision.RESTART_FROM_SCRATCH, ()),
    (ExhaustionAction.PREVIOUS_CHECKPOINT, Decision.PREVIOUS_CHECKPOINT, ("c0",)),
])
def test_exhaustion_actions_apply_to_a_user_restore(
    action: ExhaustionAction, decision: Decision, checkpoints: tuple[str, ...]
) -> None:
    policy = _policy(max_failures=2, restore_retry_num=0, on_restore_exhausted=action)
    state, _ = fold("t", [PolicySet(policy), TrialAdded(), TrialStarted(), CheckpointSaved("c0"),
                          CheckpointSaved("c1"), training_error(),
                          TrialStarted(restore_from="c1"), RestoreSucceeded()])
    record = apply(state, restore_error())
    assert record.decision is decision
    assert state.checkpoints == checkpoints


def test_fatal_types_still_give_up_at_once() -> None:
    state = _restarted(_policy(fatal_exception_types=("OSError",)))
    assert apply(state, restore_error("builtins.OSError")).decision is Decision.GIVE_UP


def test_first_result_is_accepted_in_every_status_and_changes_no_counter() -> None:
    for events in ([TrialAdded()], [TrialAdded(), TrialStarted()]):
        state, _ = fold("t", [*events, FirstResult()])
        assert state.counters == (0, 0, 0, 0)


def test_snapshot_round_trip_keeps_the_unconfirmed_restore() -> None:
    state = _restarted(_policy())
    apply(state, restore_error())
    apply(state, TrialStarted(restore_from="c1"))
    apply(state, RestoreSucceeded())
    again = TrialState.from_dict(state.to_dict())
    assert again == state and again.unconfirmed_restore == "c1"
    old = state.to_dict()
    del old["unconfirmed_restore"], old["unconfirmed_restore_failures"]
    assert TrialState.from_dict(old).unconfirmed_restore is None


def test_new_event_and_policy_field_decode_and_old_payloads_still_do() -> None:
    event: Event = FirstResult(iteration=3)
    assert decode_event(*encode_event(event)) == event
    assert decode_event("FirstResult", 1, {}) == FirstResult()
    with pytest.raises(EventDecodeError, match="iteration"):
        decode_event("FirstResult", 1, {"iteration": "3"})
    policy = _policy(restore_phase="until_first_report")
    assert decode_event(*encode_event(PolicySet(policy))) == PolicySet(policy)
    assert encode_event(PolicySet(policy))[2]["policy"]["restore_phase"] == "until_first_report"
    # A version 2 PolicySet (before restore_phase) decodes with Ray's phase.
    old = PolicySet(RetryPolicy()).to_payload()
    del old["policy"]["restore_phase"]
    decoded = decode_event("PolicySet", 2, old)
    assert isinstance(decoded, PolicySet) and decoded.policy.restore_phase is RestorePhase.RAY
    with pytest.raises(PolicyError, match="restore_phase must be one of ray, until_first_"):
        RetryPolicy(restore_phase="sometimes")  # type: ignore[arg-type]


def test_a_driver_restart_before_the_first_result_keeps_the_users_restore_count() -> None:
    state = _restarted(_policy())
    apply(state, restore_error())
    apply(state, TrialStarted(restore_from="c1"))
    apply(state, RestoreSucceeded())
    apply(state, TrialResumed())  # Tuner.restore requeued it while it was loading
    apply(state, TrialStarted(restore_from="c1"))
    assert state.restore_failures == 1  # the episode goes on
    apply(state, RestoreSucceeded())
    assert apply(state, restore_error()).counters.restore_failures == 2


def test_rays_own_restore_success_ends_the_episode_across_a_driver_restart() -> None:
    """No failure of the user's restore: Ray's success stands (the default, as Ray)."""
    state, _ = fold("t", [PolicySet(_policy()), TrialAdded(), TrialStarted(),
                          CheckpointSaved("c1"), training_error(),
                          TrialStarted(restore_from="c1"), restore_error(),
                          TrialStarted(restore_from="c1"), RestoreSucceeded(), TrialResumed(),
                          TrialStarted(restore_from="c1")])
    assert (state.status, state.restore_failures) == (Status.RESTORING, 0)
    # Under until_first_report the restore was never confirmed: the episode goes on.
    state, _ = fold("t", [PolicySet(_policy(restore_phase=FIRST_REPORT)), TrialAdded(),
                          TrialStarted(), CheckpointSaved("c1"), training_error(),
                          TrialStarted(restore_from="c1"), restore_error(),
                          TrialStarted(restore_from="c1"), RestoreSucceeded(), TrialResumed(),
                          TrialStarted(restore_from="c1")])
    assert (state.status, state.restore_failures) == (Status.RESTORING, 1)


def test_avoid_failed_nodes_excludes_the_node_of_a_failed_user_restore() -> None:
    from statemachine.domain.failures import RestoreError as Restore
    from statemachine.domain.nodes import NodeRef

    node = NodeRef(node_id="a" * 56, node_ip="10.0.0.7", hostname=None)
    state = _restarted(_policy(avoid_failed_nodes=True))
    record = apply(state, TrialFailed(Restore("builtins.OSError", "load failed"), node=node))
    assert record.decision is Decision.RETRY_RESTORE
    assert state.excluded_nodes == ("a" * 56,)
    # The default policy excludes nothing.
    state = _restarted(_policy())
    apply(state, TrialFailed(Restore("builtins.OSError", "load failed"), node=node))
    assert state.excluded_nodes == ()


@PROPERTY
@given(st.data(), policies, failures())
def test_the_guard_is_the_rules_predicates(
    data: st.DataObject, policy: RetryPolicy, error: Any
) -> None:
    # user_restore_failure inlines rules.restore_unconfirmed and rules.failure_in_restore
    # (the Ray adapter's phase rule) for speed: it says what they say, in every state.
    from statemachine.domain.compiled import _EventData
    from statemachine.domain.guards import user_restore_failure
    from statemachine.domain.rules import failure_in_restore, restore_unconfirmed

    state = TrialState("t")
    for _ in range(data.draw(st.integers(0, 25))):
        try:
            apply(state, event_step(data, state.status), policy)
        except InvalidTransitionError:
            continue
        if state.status is not Status.RUNNING:
            continue
        ed = _EventData(state, {"event": TrialFailed(error), "policy": policy})
        assert user_restore_failure(ed) == (restore_unconfirmed(state) and (
            isinstance(error, RestoreError) or failure_in_restore(state, policy)))
