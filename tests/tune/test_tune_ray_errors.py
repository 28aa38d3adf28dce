"""Ray's exceptions unwrapped for the classification rules, with real Ray exception objects."""

from __future__ import annotations

import pytest

from statemachine.domain.failures import (
    AbortError,
    ActorError,
    RestoreError,
    TrainingError,
)
from statemachine.domain.status import Status
from statemachine.tune.ray_errors import classify_ray as classify


class DataLoaderBroke(LookupError):
    """A user exception with a non-builtin base."""


def raised(exc: BaseException) -> BaseException:
    """``exc`` after a real raise, so that it carries a traceback."""
    try:
        raise exc
    except BaseException as caught:
        return caught


@pytest.fixture(scope="module")
def rx():  # type: ignore[no-untyped-def]
    """``ray.exceptions`` (importing Ray; no cluster is started)."""
    return pytest.importorskip("ray.exceptions")


def preempted_actor_died(rx):  # type: ignore[no-untyped-def]
    """A real ``ActorDiedError`` whose node was drained for preemption, as Ray builds it."""
    from ray.core.generated.common_pb2 import ActorDiedErrorContext, NodeDeathInfo

    context = ActorDiedErrorContext(
        actor_id=b"\x01" * 16,
        error_message="node preempted",
        node_death_info=NodeDeathInfo(reason=NodeDeathInfo.AUTOSCALER_DRAIN_PREEMPTED),
    )
    return rx.ActorDiedError(context)


@pytest.mark.ray
@pytest.mark.parametrize("dual", [False, True], ids=["RayTaskError", "as_instanceof_cause"])
def test_ray_task_error_is_unwrapped_to_the_user_exception(rx, dual: bool) -> None:  # type: ignore[no-untyped-def]
    task_error = rx.RayTaskError("train", "Traceback (remote)\nValueError: nan loss",
                                 ValueError("nan loss"))
    exc = task_error.as_instanceof_cause() if dual else task_error
    error = classify(exc, Status.RUNNING)
    assert type(error) is TrainingError
    assert (error.cause_type, error.message) == ("builtins.ValueError", "nan loss")
    # Ray's text of the remote failure (a dual keeps it only in its str()).
    assert "ValueError: nan loss" in error.traceback
    if not dual:
        assert error.traceback == task_error.traceback_str


@pytest.mark.ray
@pytest.mark.parametrize("preempted", [False, True])
@pytest.mark.parametrize("dual", [False, True], ids=["RayTaskError", "as_instanceof_cause"])
def test_ray_task_error_wrapping_an_actor_error_is_an_actor_error(
    rx, preempted: bool, dual: bool  # type: ignore[no-untyped-def]
) -> None:
    cause = rx.RayActorError(actor_id="a1", error_msg="worker died", preempted=preempted)
    task_error = rx.RayTaskError("train", "remote tb", cause)
    exc = task_error.as_instanceof_cause() if dual else task_error
    error = classify(exc, Status.RUNNING)
    assert type(error) is ActorError
    assert error.preempted is preempted
    assert error.cause_type == "ray.exceptions.RayActorError"


@pytest.mark.ray
@pytest.mark.parametrize("preempted", [False, True])
def test_ray_actor_error_carries_its_preempted_flag(rx, preempted: bool) -> None:  # type: ignore[no-untyped-def]
    error = classify(raised(rx.RayActorError(preempted=preempted)), Status.RUNNING)
    assert type(error) is ActorError and error.preempted is preempted


@pytest.mark.ray
def test_actor_died_on_a_preempted_node(rx) -> None:  # type: ignore[no-untyped-def]
    exc = preempted_actor_died(rx)
    assert exc.preempted
    error = classify(exc, Status.RUNNING)
    assert type(error) is ActorError and error.preempted
    assert error.cause_type == "ray.exceptions.ActorDiedError"
    assert "node preempted" in error.message
    plain = classify(rx.ActorDiedError(), Status.PENDING)
    assert type(plain) is ActorError and not plain.preempted


@pytest.mark.ray
def test_ray_errors_while_restoring_are_restore_errors(rx) -> None:  # type: ignore[no-untyped-def]
    for exc in (
        rx.RayTaskError("restore", "tb", FileNotFoundError("ckpt")),
        rx.RayTaskError("restore", "tb", FileNotFoundError("ckpt")).as_instanceof_cause(),
        rx.RayActorError(preempted=True),
        preempted_actor_died(rx),
    ):
        error = classify(exc, Status.RESTORING)
        assert type(error) is RestoreError, exc
    error = classify(rx.RayTaskError("restore", "tb", FileNotFoundError("ckpt")),
                     Status.RESTORING)
    assert error.cause_type == "builtins.FileNotFoundError"


@pytest.mark.ray
def test_fatal_type_inside_a_ray_task_error(rx) -> None:  # type: ignore[no-untyped-def]
    exc = rx.RayTaskError("train", "tb", DataLoaderBroke("gone")).as_instanceof_cause()
    assert type(classify(exc, Status.RUNNING, ["DataLoaderBroke"])) is AbortError


@pytest.mark.ray
def test_tune_abort_is_always_fatal(rx) -> None:  # type: ignore[no-untyped-def]
    from ray.tune.error import _AbortTrialExecution

    for phase in (Status.PENDING, Status.RUNNING, Status.RESTORING):
        error = classify(_AbortTrialExecution("Invalid trainable: nope"), phase)
        assert type(error) is AbortError
        assert error.cause_type == "ray.tune.error._AbortTrialExecution"
