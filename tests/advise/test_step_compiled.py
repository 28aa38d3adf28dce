"""``step_compiled`` (the simulation's step) folds as ``apply_compiled`` does, and refuses an
event the state cannot take, leaving the state untouched."""

from __future__ import annotations

import pytest

from benchmarks.advise_model import FailureModel, generate
from statemachine import InvalidTransitionError, RestoreSucceeded, TrialState
from statemachine.domain.compiled import apply_compiled, step_compiled


def test_step_compiled_folds_as_apply_compiled() -> None:
    model = FailureModel(trials=30, bad_node_p=0.2)
    for trial in generate(model, 11):
        applied, stepped = TrialState(trial.trial_id), TrialState(trial.trial_id)
        for event in trial.events:
            apply_compiled(applied, event)
            step_compiled(stepped, event, stepped.policy)
            assert stepped == applied


def test_step_compiled_refuses_an_impossible_event() -> None:
    state = TrialState("t")
    with pytest.raises(InvalidTransitionError):
        step_compiled(state, RestoreSucceeded(), state.policy)
    assert state == TrialState("t")
