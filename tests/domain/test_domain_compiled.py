"""The compiled table gives exactly what the ``transitions`` machine gives."""

from __future__ import annotations

import functools

import pytest
from domain_strategies import PROPERTY, any_event, event_step, policies
from hypothesis import given
from hypothesis import strategies as st

from statemachine.domain.compiled import (
    _EventData,
    _fire,
    apply_compiled,
    compile_machine,
    fold_compiled,
)
from statemachine.domain.events import (
    CheckpointSaved,
    Event,
    TrialAdded,
    TrialCompleted,
    TrialStarted,
)
from statemachine.domain.machine import (
    TransitionRecord,
    TrialMachine,
    apply,
    build_machine,
    fold,
)
from statemachine.domain.policy import RetryPolicy
from statemachine.domain.state import TrialState
from statemachine.domain.status import Status
from statemachine.exceptions import InvalidTransitionError


def _guard(name: str, holds: bool):  # type: ignore[no-untyped-def]
    def guard(ed) -> bool:  # type: ignore[no-untyped-def]
        return holds

    guard.__name__ = name
    return guard


def _effect(name: str):  # type: ignore[no-untyped-def]
    def effect(ed) -> None:  # type: ignore[no-untyped-def]
        ed.model.checkpoints = (*ed.model.checkpoints, name)

    effect.__name__ = effect.__qualname__ = name
    return effect


def test_the_compiled_table_is_the_machines_transitions_in_order() -> None:
    # A small machine written out here, so the expected table does not come from what is
    # compiled: every source gets its own entry, branches keep the machine's order, an
    # ``unless`` is a guard that must be false, and each branch carries its rule.
    yes, no = _guard("yes", True), _guard("no", False)
    first, second = _effect("first"), _effect("second")
    machine = TrialMachine(
        model=None, states=Status, initial=Status.NEW, auto_transitions=False,
        send_event=True, model_attribute="status", transitions=[
            dict(trigger="go", rule="a", source=[Status.NEW, Status.PENDING],
                 dest=Status.RUNNING, conditions=[no], before=[first]),
            dict(trigger="go", rule="b", source=Status.PENDING, dest=None, unless=[yes],
                 before=[second, first]),
            dict(trigger="go", rule="c", source=Status.PENDING, dest=Status.ERROR),
            dict(trigger="stop", rule="d", source=Status.RUNNING, dest=Status.TERMINATED,
                 conditions=[yes, no]),
        ])  # fmt: skip
    table = compile_machine(machine)
    assert shape(table) == {
        ("go", Status.NEW): [([("no", True)], ["first"], Status.RUNNING, ("a", ("no",)))],
        ("go", Status.PENDING): [
            ([("no", True)], ["first"], Status.RUNNING, ("a", ("no",))),
            ([("yes", False)], ["second", "first"], None, ("b", ("not yes",))),
            ([], [], Status.ERROR, ("c", ())),
        ],
        ("stop", Status.RUNNING): [
            ([("yes", True), ("no", True)], [], Status.TERMINATED, ("d", ("yes", "no"))),
        ],
    }
    # ... and folds through it as the machine does: the first branch whose guards hold.
    state = TrialState("t", status=Status.PENDING)
    ed = _EventData(state, {})
    assert _fire(table[("go", Status.PENDING)], ed, state).name == "c"  # type: ignore[union-attr]
    assert state.status is Status.ERROR and state.seq == 1
    assert _fire(table[("stop", Status.RUNNING)], ed, state) is None


def shape(table):  # type: ignore[no-untyped-def]
    """The table with callables replaced by their names, rules by (name, guards)."""
    return {
        key: [([(f.__name__, target) for f, target in guards], [f.__name__ for f in effects],
               dest, (str(rule.name), rule.guards)) for guards, effects, dest, rule in branches]
        for key, branches in table.items()
    }


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
