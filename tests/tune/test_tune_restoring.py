"""``statemachine.tune.restoring()``: what it raises, how that crosses Ray, how it is typed."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from statemachine.domain.failures import RestoreError, TrainingError
from statemachine.domain.status import Status
from statemachine.tune import restoring
from statemachine.tune.ray_errors import classify_ray as classify

pytestmark = pytest.mark.ray


class CorruptCheckpoint(Exception):
    """A user's own exception type."""


def load(path: str) -> dict[str, Any]:
    raise CorruptCheckpoint(f"{path}: bad magic number")


def test_an_exception_inside_becomes_a_restore_error_keeping_type_message_traceback() -> None:
    with pytest.raises(RestoreError) as info, restoring():
        load("ckpt_1")
    error = info.value
    assert error.cause_type == f"{__name__}.CorruptCheckpoint"
    assert error.message == "ckpt_1: bad magic number"
    assert "in load" in error.traceback and "CorruptCheckpoint: ckpt_1" in error.traceback
    assert isinstance(error.__cause__, CorruptCheckpoint)
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is RestoreError and again == error and again.traceback == error.traceback


def test_decorator_forms_and_what_passes_unchanged() -> None:
    assert restoring()(lambda: 7)() == 7
    with pytest.raises(RestoreError):
        restoring(load)("x")
    with pytest.raises(RestoreError):
        restoring()(load)("x")
    with restoring():
        pass  # a load that works: nothing raised
    with pytest.raises(KeyboardInterrupt), restoring():
        raise KeyboardInterrupt
    typed = TrainingError("builtins.ValueError", "already typed")
    with pytest.raises(TrainingError) as info, restoring():
        raise typed
    assert info.value is typed


@pytest.mark.parametrize("dual", [False, True], ids=["RayTaskError", "as_instanceof_cause"])
def test_carried_by_ray_it_is_typed_as_raised_whatever_rays_phase(dual: bool) -> None:
    from ray import cloudpickle
    from ray.exceptions import RayTaskError

    with pytest.raises(RestoreError) as info, restoring():
        load("ckpt_2")
    # Ray pickles the worker's exception into the RayTaskError it sends to the driver.
    carried = cloudpickle.loads(cloudpickle.dumps(info.value))
    task_error = RayTaskError("train", "remote traceback", carried)
    exc = task_error.as_instanceof_cause() if dual else task_error
    for phase in (Status.RUNNING, Status.RESTORING):
        error = classify(exc, phase)
        assert type(error) is RestoreError
        assert error == info.value  # cause type, message and the worker's traceback text
    nested = RayTaskError("train", "outer", RayTaskError("train", "inner", carried))
    assert type(classify(nested, Status.RUNNING)) is RestoreError
