"""Events and typed failures: exact JSON round-trip, the registry, clear decode errors."""

from __future__ import annotations

import json
import pickle
from typing import Any

import pytest
from domain_strategies import EVENT_STRATEGIES, PROPERTY, any_event, failures
from hypothesis import given

from statemachine.domain.events import (
    EVENT_TYPES,
    CheckpointSaved,
    Event,
    TrialAdded,
    TrialFailed,
    decode_event,
    encode_event,
)
from statemachine.domain.failures import (
    FAILURE_KINDS,
    ActorError,
    RestoreError,
    TrainingError,
    TrialError,
)
from statemachine.exceptions import EventDecodeError, StateMachineError


def test_every_registered_type_has_a_strategy_and_a_unique_trigger() -> None:
    assert set(EVENT_STRATEGIES) == set(EVENT_TYPES.values())
    assert len({cls.trigger for cls in EVENT_TYPES.values()}) == len(EVENT_TYPES)
    assert all(name == cls.type_name for name, cls in EVENT_TYPES.items())


@PROPERTY
@given(any_event)
def test_event_json_round_trip_is_exact(event: Event) -> None:
    type_name, version, payload = encode_event(event)
    stored = json.loads(json.dumps(payload))
    decoded = decode_event(type_name, version, stored)
    assert decoded == event
    assert type(decoded) is type(event)
    assert encode_event(decoded) == (type_name, version, stored)


@PROPERTY
@given(any_event)
def test_events_are_immutable(event: Event) -> None:
    with pytest.raises(AttributeError):
        event.anything = 1  # type: ignore[attr-defined]
    for name in event.to_payload():
        with pytest.raises(AttributeError):
            setattr(event, name, None)


@PROPERTY
@given(failures())
def test_failure_round_trip_json_and_pickle(error: TrialError) -> None:
    assert TrialError.from_dict(json.loads(json.dumps(error.to_dict()))) == error
    assert pickle.loads(pickle.dumps(error)) == error
    assert error.kind in FAILURE_KINDS


def test_failure_carries_type_message_and_traceback() -> None:
    error = ActorError("ray.exceptions.ActorDiedError", "died", "Traceback...", preempted=True)
    assert error.to_dict() == {
        "kind": "ActorError",
        "cause_type": "ray.exceptions.ActorDiedError",
        "message": "died",
        "traceback": "Traceback...",
        "preempted": True,
        "cause": "preempted",
        "ray_reason": "",
        "node_message": "",
    }
    assert str(error) == "ray.exceptions.ActorDiedError: died"
    assert RestoreError("a", "m") != TrainingError("a", "m")


def test_unregistered_event_type_cannot_be_encoded() -> None:
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Rogue(Event):
        type_name = "Rogue"

    with pytest.raises(StateMachineError, match="not registered"):
        encode_event(Rogue())


BAD: list[tuple[str, Any, Any, str]] = [
    ("NoSuchEvent", 1, {}, "unknown event type 'NoSuchEvent'"),
    ("CheckpointSaved", 3, {"checkpoint": "c"}, "version 3"),
    ("CheckpointSaved", 1, {"checkpoint": "c", "iteration": 3}, "iteration"),
    ("CheckpointSaved", 0, {"checkpoint": "c"}, "version 0"),
    ("CheckpointSaved", "1", {"checkpoint": "c"}, "version '1'"),
    ("CheckpointSaved", 1, ["c"], "not a JSON object"),
    ("CheckpointSaved", 1, {"checkpoint": 5}, "'checkpoint'"),
    ("CheckpointSaved", 1, {"checkpoint": "c", "extra": 1}, "extra"),
    ("TrialAdded", 1, {"config": [1, 2]}, "'config'"),
    ("TrialStarted", 1, {"restore_from": 3}, "'restore_from'"),
    ("TrialReset", 1, {"from_scratch": "yes"}, "'from_scratch'"),
    ("CheckpointsDiscarded", 1, {"checkpoints": "abc"}, "'checkpoints'"),
    ("CheckpointsDiscarded", 1, {"checkpoints": [1]}, "'checkpoints'"),
    ("TrialFailed", 1, {}, "error"),
    ("TrialFailed", 1, {"error": "boom"}, "'error'"),
    ("TrialFailed", 1, {"error": {"kind": "Nope", "cause_type": "x", "message": ""}}, "Nope"),
    ("TrialFailed", 1, {"error": {"kind": "ActorError", "cause_type": "x", "message": ""}},
     "preempted"),
    ("TrialFailed", 1,
     {"error": {"kind": "TrainingError", "cause_type": 1, "message": ""}}, "strings"),
    ("PolicySet", 1, {}, "policy"),
    ("PolicySet", 1, {"policy": {"max_failures": "x"}}, "max_failures"),
    ("PolicySet", 1, {"policy": {"retries": 1}}, "retries"),
    ("PolicySet", 1, {"policy": {"on_restore_exhausted": "explode"}}, "on_restore_exhausted"),
]


@pytest.mark.parametrize(("type_name", "version", "payload", "words"), BAD,
                         ids=[f"{b[0]}-{b[3]}" for b in BAD])
def test_bad_stored_event_is_a_clear_decode_error(
    type_name: str, version: Any, payload: Any, words: str
) -> None:
    with pytest.raises(EventDecodeError) as info:
        decode_event(type_name, version, payload)
    message = str(info.value)
    assert words in message
    assert "\n" not in message


def test_decode_error_for_a_newer_version_says_to_upgrade() -> None:
    with pytest.raises(EventDecodeError, match="upgrade statemachine"):
        decode_event("TrialAdded", 99, {})


def test_missing_optional_fields_take_their_defaults() -> None:
    assert decode_event("TrialAdded", 1, {}) == TrialAdded()
    assert decode_event("CheckpointSaved", 1, {"checkpoint": "c"}) == CheckpointSaved("c")


def test_trial_failed_needs_its_error() -> None:
    with pytest.raises(TypeError):
        TrialFailed()  # type: ignore[call-arg]
