"""Decoding snapshots: a policy decoded once serves equal policies, never a malformed one."""

from __future__ import annotations

import pytest

from statemachine import PolicyError, RetryPolicy, TrialState


def _snapshot(policy: dict[str, object]) -> dict[str, object]:
    data = TrialState("t1").to_dict()
    data["policy"] = policy
    return data


def test_equal_policies_decode_to_one_shared_instance() -> None:
    policy = RetryPolicy(max_failures=3, restore_retry_num=2).to_dict()
    first = TrialState.from_dict(_snapshot(dict(policy)))
    second = TrialState.from_dict(_snapshot(dict(policy)))
    assert first.policy == RetryPolicy(max_failures=3, restore_retry_num=2)
    assert first.policy is second.policy


@pytest.mark.parametrize(("field", "value"), [("max_failures", True),
                                              ("count_preemption_as_failure", 0)])
def test_a_value_equal_but_of_another_type_is_still_refused(field: str, value: object) -> None:
    policy = RetryPolicy(max_failures=1).to_dict()
    TrialState.from_dict(_snapshot(dict(policy)))  # cached now
    with pytest.raises(PolicyError, match=field):
        TrialState.from_dict(_snapshot({**policy, field: value}))
