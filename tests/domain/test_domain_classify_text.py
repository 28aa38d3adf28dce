"""The text classifier: the failure ``error.txt`` holds, typed by the rules of the live one.

Its rules are :func:`classify`'s, read from text: on real exceptions (their traceback text)
both give the same failure; on Ray's own texts (from the committed Ray folders) restores,
training failures and actor deaths come out as Ray handled them.
"""

from __future__ import annotations

import traceback
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine.domain.classify import classify
from statemachine.domain.classify_text import classify_text, parse_error_text, strip_ansi
from statemachine.domain.failures import (
    AbortError,
    ActorError,
    RestoreError,
    TrainingError,
    TrialError,
)
from statemachine.domain.status import Status
from statemachine.ingest.ray_files import parse_error_file

DATA = Path(__file__).resolve().parents[1] / "data" / "ingest"


class DataLoaderBroke(LookupError):
    """A user exception with a non-builtin base."""


def _deep(exc: BaseException, depth: int) -> None:
    if depth:
        _deep(exc, depth - 1)
    raise exc


def text_of(exc: BaseException, depth: int = 2) -> tuple[BaseException, str]:
    """``exc`` raised a few frames deep, and its traceback as Python prints it."""
    try:
        _deep(exc, depth)
    except BaseException as caught:
        return caught, "".join(traceback.format_exception(type(caught), caught,
                                                          caught.__traceback__))
    raise AssertionError("unreachable")


EXCEPTIONS = [ValueError, OSError, KeyError, RuntimeError, ZeroDivisionError, DataLoaderBroke,
              TimeoutError, MemoryError]
message = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), max_size=40)


@settings(max_examples=200, deadline=None)
@given(cls=st.sampled_from(EXCEPTIONS), text=message,
       phase=st.sampled_from([Status.PENDING, Status.RUNNING, Status.RESTORING]),
       fatal=st.lists(st.sampled_from(["ValueError", "builtins.OSError", "KeyError",
                                       "DataLoaderBroke"]), max_size=2))
def test_the_same_failure_as_the_live_classifier(
    cls: type[BaseException], text: str, phase: Status, fatal: list[str]
) -> None:
    exc, printed = text_of(cls(text.strip()) if text.strip() else cls())
    live = classify(exc, phase, fatal)
    read = classify_text(printed, phase, fatal)
    assert type(read) is type(live)
    assert (read.cause_type, read.message) == (live.cause_type, live.message)
    assert read.traceback == printed.strip("\n")


def test_a_chained_exception_is_typed_by_the_last_one() -> None:
    try:
        try:
            raise KeyError("lr")
        except KeyError as inner:
            raise ValueError("config is missing lr\nsee the docs") from inner
    except ValueError as caught:
        printed = "".join(traceback.format_exception(type(caught), caught,
                                                     caught.__traceback__))
    error = classify_text(printed)
    assert type(error) is TrainingError
    assert (error.cause_type, error.message) == ("builtins.ValueError",
                                                 "config is missing lr\nsee the docs")


def test_a_failure_of_restoring_keeps_its_cause() -> None:
    from statemachine.tune.restoring import restoring

    try:
        with restoring():
            raise OSError("shard 3 unreadable")
    except RestoreError as caught:
        printed = "".join(traceback.format_exception(type(caught), caught,
                                                     caught.__traceback__))
    # Whatever Ray's phase: the trainable typed it itself.
    error = classify_text(printed, Status.RUNNING)
    assert type(error) is RestoreError
    assert (error.cause_type, error.message) == ("builtins.OSError", "shard 3 unreadable")


def test_frames_in_a_restore_make_a_restore_failure() -> None:
    def load_checkpoint() -> None:
        raise FileNotFoundError("state.json")

    try:
        load_checkpoint()
    except FileNotFoundError as caught:
        printed = "".join(traceback.format_exception(type(caught), caught,
                                                     caught.__traceback__))
    error = classify_text(printed, Status.RUNNING)
    assert type(error) is RestoreError and error.cause_type == "builtins.FileNotFoundError"


def test_abort_and_fatal_types() -> None:
    _, printed = text_of(DataLoaderBroke("no data"))
    assert type(classify_text(printed, Status.RUNNING, ["DataLoaderBroke"])) is AbortError
    abort = "ray.tune.error._AbortTrialExecution: the trainable could not be found"
    assert type(classify_text(abort, Status.RESTORING)) is AbortError


def _ray_blocks() -> list[tuple[str, str]]:
    blocks = []
    for error in sorted(DATA.glob("ray-*/*/*/error.txt")):
        for block in parse_error_file(error.read_bytes()):
            blocks.append((f"{error.parent.parent.parent.name}/{block.call}", block.text))
    return blocks


def test_rays_own_texts() -> None:
    """From the committed folders of Ray 2.40 and 2.60, as each wrote them."""
    kinds: dict[str, set[type[TrialError]]] = {}
    for where, text in _ray_blocks():
        kinds.setdefault(where, set()).add(type(classify_text(text)))
    for version in ("ray-2.40", "ray-2.60"):
        assert kinds[f"{version}/restore"] == {RestoreError}
        assert kinds[f"{version}/train"] == {TrainingError}
        assert kinds[f"{version}/None"] == {ActorError}  # an actor death names no method
    actor = next(t for w, t in _ray_blocks() if w.endswith("/None"))
    error = classify_text(actor)
    assert isinstance(error, ActorError) and not error.preempted
    assert error.cause_type == "ray.exceptions.ActorDiedError"
    assert error.message == "The actor died unexpectedly before finishing this task."


def test_a_preemption_in_rays_words() -> None:
    """Ray's own exception, as the live classifier types it and as its text reads."""
    from ray.core.generated.common_pb2 import ActorDiedErrorContext, NodeDeathInfo
    from ray.exceptions import ActorDiedError

    def died(message: str, reason: int) -> ActorDiedError:
        return ActorDiedError(ActorDiedErrorContext(
            class_name="Flaky", actor_id=bytes(16), pid=42, node_ip_address="10.0.0.7",
            error_message=message, node_death_info=NodeDeathInfo(reason=reason)))

    preempted = died("The actor is dead because its node has died.\n\tthe actor's node was "
                     "preempted: spot reclaimed", NodeDeathInfo.AUTOSCALER_DRAIN_PREEMPTED)
    # Ray's message for any node that died says it "can happen if the node was preempted".
    lost = died("Task failed because the node it was running on is dead or unavailable. "
                "This can happen if the node was preempted, had a hardware failure, or its "
                "raylet crashed unexpectedly.", NodeDeathInfo.UNEXPECTED_TERMINATION)
    from statemachine.tune.ray_errors import classify_ray

    for exc in (preempted, lost):
        live, read = classify_ray(exc, Status.RUNNING), classify_text(str(exc))
        assert isinstance(live, ActorError) and isinstance(read, ActorError)
        assert (read.cause_type, read.preempted) == (live.cause_type, live.preempted)
    assert classify_text(str(preempted)).preempted and not classify_text(str(lost)).preempted


def test_the_ray_call_and_colour_codes() -> None:
    text = ("\x1b[36mray::Flaky.restore()\x1b[39m (pid=9, ip=10.0.0.7, actor_id=ab)\n"
            '  File "trainable.py", line 568, in restore\n    self.load_checkpoint(d)\n'
            "OSError: restore 1 failed")
    parsed = parse_error_text(text)
    assert (parsed.call, parsed.exception_type, parsed.restoring) == (
        "restore", "builtins.OSError", True)
    error = classify_text(text)
    assert type(error) is RestoreError and "\x1b" not in error.traceback


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300), st.sampled_from(list(Status)))
def test_any_text_gives_a_typed_failure(text: str, phase: Status) -> None:
    error = classify_text(text, phase)
    assert isinstance(error, TrialError)
    assert error.traceback == strip_ansi(text).strip("\n")
    assert isinstance(error.cause_type, str) and isinstance(error.message, str)


@pytest.mark.parametrize("text", ["", "\n\n", "Traceback (most recent call last):"])
def test_an_empty_text_is_a_training_failure_of_unknown_cause(text: str) -> None:
    error = classify_text(text)
    assert type(error) is TrainingError and error.cause_type == "unknown"
