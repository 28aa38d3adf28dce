"""Ray's words -> cause (``statemachine.domain.ray_causes``), read from Ray's own objects.

No cluster: the protobuf messages are Ray's (``ray.core.generated.common_pb2``), turned into
the dict the state API returns by Ray's own converter; the exceptions are Ray's classes built
as Ray's deserializer builds them; the sentences of a death message are looked up in the
installed Ray's GCS server binary. The tables are complete for the installed Ray: a reason
Ray adds fails here until it is mapped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statemachine.domain.classify import Raised, classify_raised, qualified_name
from statemachine.domain.death import ActorDeath, DeathCause
from statemachine.domain.failures import ActorError, RestoreError
from statemachine.domain.ray_causes import (
    ACTOR_DIED_REASON_NAMES,
    ACTOR_DIED_REASONS,
    CONTEXT_CAUSES,
    EXCEPTION_CAUSES,
    MESSAGE_SENTENCES,
    NODE_DEATH_REASON_NAMES,
    NODE_DEATH_REASONS,
    death_from_exception,
    death_from_node_table,
    death_from_state_api,
)
from statemachine.domain.status import Status

pytestmark = pytest.mark.ray

rx = pytest.importorskip("ray.exceptions")
pb = pytest.importorskip("ray.core.generated.common_pb2")
state_common = pytest.importorskip("ray.util.state.common")

Context, NodeInfo = pb.ActorDiedErrorContext, pb.NodeDeathInfo


def as_state_api(cause: Any) -> dict[str, Any]:
    """An ``ActorDeathCause`` as ``get_actor(id, detail=True).death_cause`` gives it."""
    return state_common.protobuf_message_to_dict(cause, [])  # type: ignore[no-any-return]


def type_names(exc: BaseException) -> list[str]:
    """What the Ray adapter hands over: the qualified names of the type and its bases."""
    return [qualified_name(cls) for cls in type(exc).__mro__]


def read(exc: BaseException) -> ActorDeath | None:
    """``death_from_exception`` as the Ray adapter calls it, on a real exception."""
    return death_from_exception(
        type_names(exc), preempted=bool(getattr(exc, "preempted", False)),
        actor_init_failed=bool(getattr(exc, "actor_init_failed", False)), message=str(exc))


# ---------------------------------------------------------------- the tables are Ray's


def test_the_enum_tables_are_rays_enums() -> None:
    assert ACTOR_DIED_REASON_NAMES == {v: k for k, v in Context.Reason.items()}
    assert NODE_DEATH_REASON_NAMES == {v: k for k, v in NodeInfo.Reason.items()}
    assert set(ACTOR_DIED_REASONS) == set(Context.Reason.keys())
    assert set(NODE_DEATH_REASONS) == set(NodeInfo.Reason.keys())


def test_every_death_context_is_mapped() -> None:
    contexts = {f.name for f in pb.ActorDeathCause.DESCRIPTOR.oneofs_by_name["context"].fields}
    assert contexts == {*CONTEXT_CAUSES, "actor_died_error_context"}


def test_every_exception_named_is_one_of_rays() -> None:
    for name in EXCEPTION_CAUSES:
        module, _, cls = name.rpartition(".")
        assert module == "ray.exceptions" and hasattr(rx, cls), name
    assert qualified_name(rx.RayActorError) == "ray.exceptions.RayActorError"


def test_the_sentences_are_written_by_rays_gcs() -> None:
    # The sentences of MESSAGE_SENTENCES are Ray's own (gcs_actor_manager.cc): each is in
    # the installed Ray's GCS server, as it writes it into an actor's death message.
    gcs = Path(rx.__file__).parent / "core" / "src" / "ray" / "gcs" / "gcs_server"
    if not gcs.is_file():
        pytest.skip(f"no GCS server binary at {gcs}")
    binary = gcs.read_bytes()
    for sentence, _, _ in MESSAGE_SENTENCES:
        text = sentence.lstrip("\t").encode()
        assert text in binary, sentence


# ---------------------------------------------------------------- the state API


def _node(reason: str, message: str = "health check failed") -> Any:
    return pb.ActorDeathCause(actor_died_error_context=Context(
        reason=Context.NODE_DIED, actor_id=b"\x01" * 16,
        node_death_info=NodeInfo(reason=NodeInfo.Reason.Value(reason), reason_message=message)))


@pytest.mark.parametrize(("reason", "cause"), [
    ("AUTOSCALER_DRAIN_PREEMPTED", DeathCause.PREEMPTED),
    ("UNEXPECTED_TERMINATION", DeathCause.NODE_DIED),
    ("EXPECTED_TERMINATION", DeathCause.NODE_TERMINATED),
    ("AUTOSCALER_DRAIN_IDLE", DeathCause.NODE_DRAINED_IDLE),
])
def test_a_node_death_from_the_state_api(reason: str, cause: DeathCause) -> None:
    assert death_from_state_api(as_state_api(_node(reason))) == ActorDeath(
        cause, f"NODE_DIED/{reason}", "health check failed")


def test_a_node_death_without_a_reason_is_node_died() -> None:
    bare = pb.ActorDeathCause(actor_died_error_context=Context(reason=Context.NODE_DIED))
    assert death_from_state_api(as_state_api(bare)) == ActorDeath(DeathCause.NODE_DIED,
                                                                  "NODE_DIED")
    unspecified = _node("UNSPECIFIED", "")
    assert death_from_state_api(as_state_api(unspecified)).cause is DeathCause.NODE_DIED


@pytest.mark.parametrize(("reason", "cause"), [
    ("RAY_KILL", DeathCause.KILLED), ("OWNER_DIED", DeathCause.OWNER_DIED),
    ("OUT_OF_SCOPE", DeathCause.OUT_OF_SCOPE), ("REF_DELETED", DeathCause.OUT_OF_SCOPE),
    ("UNSPECIFIED", DeathCause.UNKNOWN),
])
def test_other_reasons_from_the_state_api(reason: str, cause: DeathCause) -> None:
    message = pb.ActorDeathCause(actor_died_error_context=Context(
        reason=Context.Reason.Value(reason)))
    death = death_from_state_api(as_state_api(message))
    assert death.cause is cause
    assert death.ray_reason == ("" if cause is DeathCause.UNKNOWN else reason)


def test_a_worker_death_keeps_its_exit_type() -> None:
    message = pb.ActorDeathCause(actor_died_error_context=Context(
        reason=Context.WORKER_DIED,
        error_message="The actor is dead because its worker process has died. Worker exit "
                      "type: SYSTEM_ERROR Worker exit detail: killed by signal 9"))
    assert death_from_state_api(as_state_api(message)) == ActorDeath(
        DeathCause.WORKER_CRASHED, "WORKER_DIED/SYSTEM_ERROR")


@pytest.mark.parametrize(("context", "cause"), [
    (lambda: {"oom_context": pb.OomContext(error_message="low memory")}, DeathCause.OOM),
    (lambda: {"runtime_env_failed_context": pb.RuntimeEnvFailedContext(error_message="pip")},
     DeathCause.RUNTIME_ENV_FAILED),
    (lambda: {"actor_unschedulable_context": pb.ActorUnschedulableContext()},
     DeathCause.UNSCHEDULABLE),
    (lambda: {"creation_task_failure_context": pb.RayException(
        formatted_exception_string="ValueError")}, DeathCause.CREATION_FAILED),
])
def test_the_other_contexts_from_the_state_api(context: Any, cause: DeathCause) -> None:
    fields = context()
    death = death_from_state_api(as_state_api(pb.ActorDeathCause(**fields)))
    assert death == ActorDeath(cause, next(iter(fields)))


def test_no_cause_is_unknown() -> None:
    assert death_from_state_api(as_state_api(pb.ActorDeathCause())).cause is DeathCause.UNKNOWN
    assert death_from_state_api(None).cause is DeathCause.UNKNOWN


# ---------------------------------------------------------------- the node table


@pytest.mark.parametrize("reason", list(NodeInfo.Reason.keys()))
def test_the_node_table_reason_by_number_or_name(reason: str) -> None:
    number = NodeInfo.Reason.Value(reason)
    by_number = death_from_node_table(number, "drained")
    assert by_number == death_from_node_table(reason, "drained")
    if reason == "UNSPECIFIED":  # a node that did not die says nothing of the actor
        assert by_number.cause is DeathCause.UNKNOWN
    else:
        assert by_number == ActorDeath(NODE_DEATH_REASONS[reason], f"NODE_DIED/{reason}",
                                       "drained")


# ---------------------------------------------------------------- the exception as raised


def _died(node_reason: str | None, error_message: str) -> BaseException:
    """An ``ActorDiedError`` as Ray's deserializer builds it from the GCS's death context."""
    context = Context(reason=Context.NODE_DIED if node_reason else Context.WORKER_DIED,
                      actor_id=b"\x02" * 16, error_message=error_message, class_name="T")
    if node_reason:
        context.node_death_info.CopyFrom(NodeInfo(reason=NodeInfo.Reason.Value(node_reason),
                                                  reason_message="spot reclaimed"))
    return rx.ActorDiedError(cause=context)  # type: ignore[no-any-return]


def test_a_preempted_actor_as_raised() -> None:
    exc = _died("AUTOSCALER_DRAIN_PREEMPTED", "The actor died because its node has died. "
                "Node Id: ab\n\tthe actor's node was preempted: spot reclaimed")
    assert exc.preempted  # Ray's own flag, from the very same reason
    assert read(exc) == ActorDeath(DeathCause.PREEMPTED, "NODE_DIED/AUTOSCALER_DRAIN_PREEMPTED",
                                   "spot reclaimed")


def test_a_preempted_flag_alone_is_preempted() -> None:
    assert read(rx.RayActorError(preempted=True)) == ActorDeath(DeathCause.PREEMPTED,
                                                                "preempted")


def test_a_node_that_died_unexpectedly_as_raised() -> None:
    exc = _died("UNEXPECTED_TERMINATION", "The actor died because its node has died. Node Id: "
                "ab\n\tthe actor's node was terminated unexpectedly: health check failed")
    assert not exc.preempted
    assert read(exc) == ActorDeath(DeathCause.NODE_DIED, "NODE_DIED/UNEXPECTED_TERMINATION",
                                   "health check failed")


def test_a_worker_that_died_as_raised() -> None:
    exc = _died(None, "The actor is dead because its worker process has died. Worker exit "
                "type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits")
    assert read(exc) == ActorDeath(DeathCause.WORKER_CRASHED, "WORKER_DIED/SYSTEM_ERROR")


def test_a_kill_as_raised() -> None:
    exc = _died(None, "The actor is dead because it was killed by `ray.kill`.")
    assert read(exc) == ActorDeath(DeathCause.KILLED, "RAY_KILL")


def test_an_unavailable_actor_says_nothing_yet() -> None:
    exc = rx.ActorUnavailableError("connection lost", b"\x03" * 16)
    assert read(exc) == ActorDeath()  # unknown: the state API may tell (an amendment)


def test_a_preempted_sentence_without_rays_flag_proves_nothing() -> None:
    exc = rx.RayActorError(error_msg="user says: the actor's node was preempted: maybe")
    assert read(exc) == ActorDeath()


def test_a_creation_failure_as_raised() -> None:
    task_error = rx.RayTaskError("__init__", "Traceback ...", ValueError("bad config"))
    exc = rx.ActorDiedError.from_task_error(task_error)
    assert exc.actor_init_failed
    assert read(exc) == ActorDeath(DeathCause.CREATION_FAILED, "actor_init_failed")


@pytest.mark.parametrize(("exc", "cause", "reason"), [
    (lambda: rx.OutOfMemoryError("Task was killed due to the node running low on memory."),
     DeathCause.OOM, "oom_context"),
    (lambda: rx.RuntimeEnvSetupError("pip install failed"), DeathCause.RUNTIME_ENV_FAILED,
     "runtime_env_failed_context"),
    (lambda: rx.ActorUnschedulableError("no node"), DeathCause.UNSCHEDULABLE,
     "actor_unschedulable_context"),
])
def test_deaths_ray_raises_as_errors_of_their_own(exc: Any, cause: DeathCause,
                                                  reason: str) -> None:
    assert read(exc()) == ActorDeath(cause, reason)


@pytest.mark.parametrize("exc", [
    lambda: ValueError("nan"), lambda: rx.RayTaskError("train", "tb", ValueError("nan")),
    lambda: rx.WorkerCrashedError(),
])
def test_other_exceptions_are_no_actor_death(exc: Any) -> None:
    assert read(exc()) is None


# ---------------------------------------------------------------- into the typed failure


def test_an_oom_becomes_an_actor_failure_with_its_cause() -> None:
    exc = rx.OutOfMemoryError("low memory")
    raised = Raised(exc, exc, "tb", None, None, read(exc))
    error = classify_raised(raised, Status.RUNNING)
    assert isinstance(error, ActorError) and error.cause is DeathCause.OOM
    assert error.cause_type == "ray.exceptions.OutOfMemoryError"
    # while restoring, a death is a restore failure, whatever its cause (as Ray)
    assert isinstance(classify_raised(raised, Status.RESTORING), RestoreError)


def test_preempted_alone_still_classifies_as_before() -> None:
    exc = rx.RayActorError(preempted=True)
    error = classify_raised(Raised(exc, exc, "tb", True), Status.RUNNING)
    assert isinstance(error, ActorError) and error.preempted
    error = classify_raised(Raised(exc, exc, "tb", False), Status.RUNNING)
    assert isinstance(error, ActorError) and error.cause is DeathCause.UNKNOWN
