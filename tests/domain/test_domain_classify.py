"""The classifier: (raw exception, phase) -> typed failure, with real Ray exception objects."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from statemachine.domain.classify import classify
from statemachine.domain.failures import (
    AbortError,
    ActorError,
    RestoreError,
    TrainingError,
)
from statemachine.domain.status import Status

REPO = Path(__file__).resolve().parents[2]


class DataLoaderBroke(LookupError):
    """A user exception with a non-builtin base."""


def raised(exc: BaseException) -> BaseException:
    """``exc`` after a real raise, so that it carries a traceback."""
    try:
        raise exc
    except BaseException as caught:
        return caught


def test_plain_exception_while_running_is_a_training_error() -> None:
    error = classify(raised(ValueError("bad lr")), Status.RUNNING)
    assert type(error) is TrainingError
    assert (error.cause_type, error.message) == ("builtins.ValueError", "bad lr")
    assert "raise exc" in error.traceback and "ValueError: bad lr" in error.traceback


@pytest.mark.parametrize("phase", [Status.PENDING, Status.RUNNING, Status.PAUSED])
def test_user_exception_outside_restore_is_a_training_error(phase: Status) -> None:
    assert type(classify(DataLoaderBroke("x"), phase)) is TrainingError


def test_anything_while_restoring_is_a_restore_error() -> None:
    error = classify(raised(OSError("checkpoint missing")), Status.RESTORING)
    assert type(error) is RestoreError
    assert error.cause_type == "builtins.OSError"


def test_typed_failure_is_returned_as_is() -> None:
    error = ActorError("x.Y", "m", preempted=True)
    assert classify(error, Status.RESTORING) is error


@pytest.mark.parametrize(
    "listed",
    [
        "DataLoaderBroke",
        f"{__name__}.DataLoaderBroke",
        "LookupError",
        "builtins.LookupError",
    ],
)
def test_policy_listed_fatal_type_is_an_abort_by_short_or_qualified_name(listed: str) -> None:
    for phase in (Status.RUNNING, Status.RESTORING):
        error = classify(raised(DataLoaderBroke("no data")), phase, [listed])
        assert type(error) is AbortError
        assert error.cause_type.endswith("DataLoaderBroke")
        assert error.message == "no data"


def test_unlisted_type_is_not_fatal() -> None:
    error = classify(DataLoaderBroke("x"), Status.RUNNING, ["ValueError", "my.DataLoaderBroke"])
    assert type(error) is TrainingError


def test_classifying_a_plain_exception_does_not_import_ray() -> None:
    code = (
        "import sys, statemachine\n"
        "from statemachine import classify, Status\n"
        "e = classify(KeyError('k'), Status.RUNNING, ['ValueError'])\n"
        "assert type(e).__name__ == 'TrainingError', e\n"
        "bad = sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.'))\n"
        "print('RAY MODULES', bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "RAY MODULES []" in done.stdout


# ---------------------------------------------------------------- real Ray exception objects


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
