"""The retry policy: validation naming the field, Ray's environment defaults, JSON form."""

from __future__ import annotations

from typing import Any

import pytest
from domain_strategies import PROPERTY, policies
from hypothesis import given

from statemachine.domain.policy import (
    COUNT_PREEMPTION_ENV,
    RESTORE_RETRY_ENV,
    ExhaustionAction,
    RetryPolicy,
)
from statemachine.exceptions import PolicyError, StateMachineError


def test_defaults_are_rays() -> None:
    p = RetryPolicy()
    assert (p.max_failures, p.restore_retry_num, p.count_preemption_as_failure) == (0, 0, False)
    assert p.max_preemptions is None
    assert p.on_restore_exhausted is ExhaustionAction.RETRY_CHECKPOINT
    assert p.fatal_exception_types == ()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_failures", "3"),
        ("max_failures", 1.5),
        ("max_failures", True),
        ("restore_retry_num", -1),
        ("restore_retry_num", None),
        ("max_preemptions", -2),
        ("max_preemptions", "many"),
        ("count_preemption_as_failure", 1),
        ("delete_discarded_checkpoints", "yes"),
        ("on_restore_exhausted", "give_up"),
        ("fatal_exception_types", "KeyError"),
        ("fatal_exception_types", ("KeyError", 3)),
        ("fatal_exception_types", ("",)),
    ],
)
def test_invalid_field_is_refused_with_its_name(field: str, value: Any) -> None:
    with pytest.raises(PolicyError, match=field) as info:
        RetryPolicy(**{field: value})
    assert isinstance(info.value, StateMachineError) and isinstance(info.value, ValueError)
    assert "\n" not in str(info.value)


def test_exhaustion_action_accepts_its_string_value() -> None:
    p = RetryPolicy(on_restore_exhausted="previous_checkpoint")  # type: ignore[arg-type]
    assert p.on_restore_exhausted is ExhaustionAction.PREVIOUS_CHECKPOINT


def test_fatal_types_list_becomes_a_tuple() -> None:
    p = RetryPolicy(fatal_exception_types=["KeyError"])  # type: ignore[arg-type]
    assert p.fatal_exception_types == ("KeyError",)
    assert hash(p) == hash(RetryPolicy(fatal_exception_types=("KeyError",)))


@pytest.mark.parametrize(
    ("max_failures", "num_failures", "within"),
    [(0, 0, True), (0, 1, False), (3, 3, True), (3, 4, False), (-1, 10**6, True)],
)
def test_within_max_failures_is_rays_should_recover(
    max_failures: int, num_failures: int, within: bool
) -> None:
    assert RetryPolicy(max_failures=max_failures).within_max_failures(num_failures) is within


def test_is_fatal_by_short_or_qualified_name() -> None:
    p = RetryPolicy(fatal_exception_types=("KeyError", "my.pkg.Oops"))
    assert p.is_fatal("builtins.KeyError")
    assert p.is_fatal("my.pkg.Oops")
    assert not p.is_fatal("other.Oops")
    assert not p.is_fatal("builtins.ValueError")


def test_from_env_reads_rays_variables() -> None:
    env = {RESTORE_RETRY_ENV: "3", COUNT_PREEMPTION_ENV: "1"}
    p = RetryPolicy.from_env(env, max_failures=2)
    assert (p.restore_retry_num, p.count_preemption_as_failure, p.max_failures) == (3, True, 2)
    assert RetryPolicy.from_env({}) == RetryPolicy()
    assert RetryPolicy.from_env({RESTORE_RETRY_ENV: "", COUNT_PREEMPTION_ENV: ""}) == (
        RetryPolicy())


def test_from_env_overrides_win() -> None:
    p = RetryPolicy.from_env({RESTORE_RETRY_ENV: "3"}, restore_retry_num=0)
    assert p.restore_retry_num == 0


def test_from_env_reads_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RESTORE_RETRY_ENV, "5")
    monkeypatch.setenv(COUNT_PREEMPTION_ENV, "0")
    assert RetryPolicy.from_env().restore_retry_num == 5


@pytest.mark.parametrize(
    ("name", "value", "field"),
    [
        (RESTORE_RETRY_ENV, "two", "restore_retry_num"),
        (RESTORE_RETRY_ENV, "-1", "restore_retry_num"),
        (RESTORE_RETRY_ENV, "1.5", "restore_retry_num"),
        (COUNT_PREEMPTION_ENV, "yes", "count_preemption_as_failure"),
    ],
)
def test_from_env_bad_value_names_the_variable_and_the_field(
    name: str, value: str, field: str
) -> None:
    with pytest.raises(PolicyError) as info:
        RetryPolicy.from_env({name: value})
    assert name in str(info.value) and field in str(info.value) and repr(value) in str(
        info.value)


def test_from_env_bad_override_names_the_field() -> None:
    with pytest.raises(PolicyError, match="max_failures"):
        RetryPolicy.from_env({}, max_failures="x")


@PROPERTY
@given(policies)
def test_json_round_trip_and_replace(p: RetryPolicy) -> None:
    assert RetryPolicy.from_dict(p.to_dict()) == p
    assert p.replace() == p
    assert p.replace(max_failures=7).max_failures == 7


def test_from_dict_refuses_unknown_fields() -> None:
    with pytest.raises(PolicyError, match="max_retries"):
        RetryPolicy.from_dict({"max_retries": 3})


def test_replace_validates() -> None:
    with pytest.raises(PolicyError, match="restore_retry_num"):
        RetryPolicy().replace(restore_retry_num=-5)
