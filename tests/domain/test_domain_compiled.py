"""The compiled table gives exactly what the ``transitions`` machine gives."""

from __future__ import annotations

import functools

import pytest
from domain_strategies import PROPERTY, any_event, event_step, policies
from hypothesis import given
from hypothesis import strategies as st

from statemachine.domain.compiled import TABLE, apply_compiled, compile_machine, fold_compiled
from statemachine.domain.events import (
    CheckpointSaved,
    Event,
    TrialAdded,
    TrialCompleted,
    TrialStarted,
)
from statemachine.domain.machine import MACHINE, TransitionRecord, apply, build_machine, fold
from statemachine.domain.policy import RetryPolicy
from statemachine.domain.state import TrialState
from statemachine.domain.status import Status
from statemachine.exceptions import InvalidTransitionError


def test_table_covers_every_transition_of_the_machine() -> None:
    expected = sum(
        len(transitions)
        for event in MACHINE.events.values()
        for transitions in event.transitions.values()
    )
    assert sum(len(branches) for branches in TABLE.values()) == expected
    assert {trigger for trigger, _ in TABLE} == set(MACHINE.events)


def shape(table):  # type: ignore[no-untyped-def]
    """The table with callables replaced by their names (closures differ per build)."""
    return {
        key: [([(f.__name__, target) for f, target in guards], [f.__name__ for f in effects],
               dest) for guards, effects, dest in branches]
        for key, branches in table.items()
    }


def test_compiling_a_fresh_machine_gives_the_same_table() -> None:
    assert shape(compile_machine(build_machine())) == shape(TABLE)
    restoring = [dest for _, _, dest in TABLE[("fail", Status.RESTORING)]]
    assert restoring[0] is Status.ERROR and restoring[-1] is Status.ERROR


def test_machine_wide_callbacks_are_refused() -> None:
    machine = build_machine()
    machine.before_state_change = [lambda event_data: None]
    with pytest.raises(ValueError, match="machine-wide callbacks"):
        compile_machine(machine)


def outcome(fn, state: TrialState, event: Event, policy: RetryPolicy | None):  # type: ignore[no-untyped-def]
    """The record of one apply, or the error it raised (with the state checked unchanged)."""
    before = state.to_dict()
    try:
        return fn(state, event, policy)
    except InvalidTransitionError as exc:
        assert state.to_dict() == before
        return (exc.trial_id, exc.status, exc.event, str(exc))


@PROPERTY
@given(st.data(), policies | st.none(), st.integers(0, 60))
def test_compiled_equals_transitions_on_random_sequences(
    data: st.DataObject, policy: RetryPolicy | None, length: int
) -> None:
    by_machine = TrialState("t1")
    by_table = TrialState("t1")
    events: list[Event] = []
    for _ in range(length):
        event = event_step(data, by_machine.status)
        events.append(event)
        expected = outcome(apply, by_machine, event, policy)
        got = outcome(apply_compiled, by_table, event, policy)
        assert got == expected
        assert by_table == by_machine
    try:
        expected_state = fold("t1", events, policy)[0]
    except InvalidTransitionError as exc:
        with pytest.raises(InvalidTransitionError) as info:
            fold_compiled("t1", events, policy)
        assert str(info.value) == str(exc)
    else:
        assert fold_compiled("t1", events, policy) == expected_state


@PROPERTY
@given(st.lists(any_event, max_size=20), policies | st.none())
def test_compiled_equals_transitions_on_arbitrary_events(
    events: list[Event], policy: RetryPolicy | None
) -> None:
    by_machine = TrialState("t1")
    by_table = TrialState("t1")
    for event in events:
        assert outcome(apply_compiled, by_table, event, policy) == outcome(
            apply, by_machine, event, policy)
        assert by_table == by_machine


@PROPERTY
@given(st.data(), policies | st.none(), st.integers(0, 60), st.sampled_from(["t1", "t2"]))
def test_a_previous_record_is_returned_only_when_equal(
    data: st.DataObject, policy: RetryPolicy | None, length: int, other_trial: str
) -> None:
    # Any earlier record is offered (this trial's, or a twin's fed the same events): what
    # comes back always equals the machine's record, and is the offered one only when equal.
    by_machine = TrialState("t1")
    by_table = TrialState("t1")
    twin = TrialState(other_trial)
    offered: list[TransitionRecord] = []
    for _ in range(length):
        event = event_step(data, by_machine.status)
        previous = data.draw(st.sampled_from(offered)) if offered else None
        expected = outcome(apply, by_machine, event, policy)
        got = outcome(functools.partial(apply_compiled, previous=previous), by_table, event, policy)
        assert got == expected
        assert by_table == by_machine
        if previous is not None and got == previous:
            assert got is previous
        for record in (got, outcome(apply_compiled, twin, event, policy)):
            if isinstance(record, TransitionRecord):
                offered.append(record)


def test_a_run_of_checkpoints_makes_one_record() -> None:
    state = fold("t1", [TrialAdded(), TrialStarted()])[0]
    records = []
    for i in range(5):
        records.append(apply_compiled(state, CheckpointSaved(f"c{i}"), None,
                                      records[-1] if records else None))
    assert all(r is records[0] for r in records)
    assert state.checkpoints == tuple(f"c{i}" for i in range(5)) and state.seq == 7


def test_fold_compiled_leaves_the_given_state_alone() -> None:
    start = fold("t1", [TrialAdded()])[0]
    before = start.to_dict()
    end = fold_compiled("t1", [TrialStarted(), TrialCompleted()], state=start)
    assert end.status is Status.TERMINATED and end.seq == 3
    assert start.to_dict() == before
    with pytest.raises(InvalidTransitionError, match=r"'t1'.*TrialCompleted.*TERMINATED"):
        fold_compiled("t1", [TrialCompleted()], state=end)
