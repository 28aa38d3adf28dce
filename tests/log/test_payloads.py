"""The compiled payload encoders write exactly what the generic JSON path writes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statemachine import CheckpointSaved, FirstResult, TrialStarted
from statemachine.domain.events import Event
from statemachine.exceptions import StateMachineError
from statemachine.log.payloads import payload_json
from statemachine.log.records import dump_json, parse_json
from tests.domain.domain_strategies import any_event, hostile_text, json_values


def generic(event: Event) -> str:
    return dump_json(event.to_payload())


@given(any_event)
def test_every_event_type_is_written_as_the_generic_encoder_writes_it(event: Event) -> None:
    assert payload_json(event) == generic(event)


@given(hostile_text(max_size=40))
def test_hostile_text_in_a_compiled_field_is_the_same_text(text: str) -> None:
    # Controls, quotes, backslashes, markup, any Unicode and lone surrogates (escaped).
    for event in (CheckpointSaved(text), TrialStarted(restore_from=text)):
        written = payload_json(event)
        assert written == generic(event)
        written.encode("utf-8")  # storable: no lone surrogate is left raw
        assert event.from_payload(parse_json(written)) == event


class _Text(str):
    pass


class _Number(int):
    pass


@given(json_values)
def test_a_value_of_another_type_takes_the_generic_path(value: Any) -> None:
    # The fields are not checked at construction: whatever a field holds, the text is the
    # generic encoder's (a float, a bool where an int goes, a list, a dict...).
    for event in (CheckpointSaved(value), FirstResult(value)):
        assert payload_json(event) == generic(event)


@pytest.mark.parametrize(
    "value", [True, False, 0, -7, 2**70, 1.5, float("nan"), _Text("x"), _Number(3), None]
)
def test_values_the_encoder_tells_apart_by_exact_type(value: Any) -> None:
    for event in (CheckpointSaved(value), FirstResult(value)):
        assert payload_json(event) == generic(event)


def test_an_unregistered_event_type_is_refused_every_time() -> None:
    @dataclass(frozen=True)
    class Unregistered(Event):
        type_name = "Unregistered"
        note: str = ""

    for _ in range(2):  # never compiled, so never let through later
        with pytest.raises(StateMachineError, match="not registered"):
            payload_json(Unregistered("x"))


@given(st.builds(FirstResult, iteration=st.none() | st.integers()))
def test_integers_of_any_size(event: FirstResult) -> None:
    assert payload_json(event) == generic(event)
