"""Why the actor died, read by the Ray adapter from Ray's real exception objects and asked of
Ray's GCS after the fact.

The exceptions are Ray's, built as Ray's deserializer builds them: a ``RayErrorInfo``
protobuf serialized and parsed again, its ``ActorDeathCause`` handed to ``ActorDiedError``
(``SerializationContext._deserialize_actor_died_error``), an ``OUT_OF_MEMORY`` error's message
to ``OutOfMemoryError``, an ``ACTOR_UNAVAILABLE`` error's to ``ActorUnavailableError``. Then,
on a real local Ray: an actor whose worker process is SIGKILLed and one ``ray.kill``-ed, read
from the exception Ray raised and from the GCS actor table, as the background lookup does.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from statemachine.domain.death import DeathCause
from statemachine.domain.events import DeathCauseLearned
from statemachine.domain.failures import ActorError, RestoreError, TrainingError
from statemachine.domain.status import Status
from statemachine.tune import compat, late_causes
from statemachine.tune.ray_errors import classify_ray, exception_death

pytestmark = pytest.mark.ray

rx = pytest.importorskip("ray.exceptions")
pb = pytest.importorskip("ray.core.generated.common_pb2")

Context, NodeInfo = pb.ActorDiedErrorContext, pb.NodeDeathInfo


def as_ray_deserializes(context: Any) -> BaseException:
    """An ``ActorDiedError`` as Ray's deserializer makes it from the bytes of a
    ``RayErrorInfo`` carrying the GCS's ``ActorDeathCause``."""
    wire = pb.RayErrorInfo(actor_died_error=pb.ActorDeathCause(
        actor_died_error_context=context)).SerializeToString()
    info = pb.RayErrorInfo()
    info.ParseFromString(wire)
    assert info.actor_died_error.HasField("actor_died_error_context")
    return rx.ActorDiedError(cause=info.actor_died_error.actor_died_error_context)  # type: ignore[no-any-return]


def node_died(reason: str, sentence: str, message: str) -> BaseException:
    context = Context(
        reason=Context.NODE_DIED, actor_id=b"\x07" * 16, class_name="ImplicitFunc", pid=4242,
        node_ip_address="10.0.0.7",
        error_message=f"The actor died because its node has died. Node Id: ab12\n\t{sentence}"
                      f"{message}",
        node_death_info=NodeInfo(reason=NodeInfo.Reason.Value(reason), reason_message=message))
    return as_ray_deserializes(context)


@pytest.mark.parametrize(("reason", "sentence", "cause", "preempted"), [
    ("AUTOSCALER_DRAIN_PREEMPTED", "the actor's node was preempted: ", DeathCause.PREEMPTED, True),
    ("UNEXPECTED_TERMINATION", "the actor's node was terminated unexpectedly: ",
     DeathCause.NODE_DIED, False),
    ("EXPECTED_TERMINATION", "the actor's node was terminated expectedly: ",
     DeathCause.NODE_TERMINATED, False),
])
def test_a_node_death_as_ray_raises_it(reason: str, sentence: str, cause: DeathCause,
                                       preempted: bool) -> None:
    exc = node_died(reason, sentence, "spot reclaimed")
    assert exc.preempted is preempted  # type: ignore[attr-defined]  # Ray's own flag
    error = classify_ray(exc, Status.RUNNING)
    assert isinstance(error, ActorError)
    assert (error.cause, error.preempted) == (cause, preempted)
    assert error.death.ray_reason == f"NODE_DIED/{reason}"
    assert error.death.node_message == "spot reclaimed"
    assert error.cause_type == "ray.exceptions.ActorDiedError"


def test_a_worker_death_and_a_kill_as_ray_raises_them() -> None:
    crashed = as_ray_deserializes(Context(
        reason=Context.WORKER_DIED, actor_id=b"\x08" * 16,
        error_message="The actor is dead because its worker process has died. Worker exit "
                      "type: SYSTEM_ERROR Worker exit detail: killed by signal 9"))
    killed = as_ray_deserializes(Context(
        reason=Context.RAY_KILL, actor_id=b"\x09" * 16,
        error_message="The actor is dead because it was killed by `ray.kill`."))
    assert exception_death(crashed).cause is DeathCause.WORKER_CRASHED  # type: ignore[union-attr]
    assert exception_death(crashed).ray_reason == "WORKER_DIED/SYSTEM_ERROR"  # type: ignore[union-attr]
    assert exception_death(killed).cause is DeathCause.KILLED  # type: ignore[union-attr]


def test_an_oom_and_an_unavailable_actor_as_ray_raises_them() -> None:
    # OUT_OF_MEMORY: OutOfMemoryError(error_info.error_message); ACTOR_UNAVAILABLE:
    # ActorUnavailableError(error_info.error_message, actor_id) (serialization.py)
    oom = rx.OutOfMemoryError("Task was killed due to the node running low on memory.")
    unavailable = rx.ActorUnavailableError("connection lost", b"\x0a" * 16)
    error = classify_ray(oom, Status.RUNNING)
    assert isinstance(error, ActorError) and error.cause is DeathCause.OOM
    error = classify_ray(unavailable, Status.RUNNING)
    assert isinstance(error, ActorError) and error.cause is DeathCause.UNKNOWN
    # while restoring a death is a restore failure, as Ray counts it
    assert isinstance(classify_ray(oom, Status.RESTORING), RestoreError)


def test_a_death_carried_by_a_task_error_keeps_its_cause() -> None:
    died = node_died("AUTOSCALER_DRAIN_PREEMPTED", "the actor's node was preempted: ", "spot")
    wrapped = rx.RayTaskError("train", "Traceback ...", died)
    error = classify_ray(wrapped, Status.RUNNING)
    assert isinstance(error, ActorError) and error.cause is DeathCause.PREEMPTED
    user = rx.RayTaskError("train", "Traceback ...", ValueError("nan")).as_instanceof_cause()
    assert isinstance(classify_ray(user, Status.RUNNING), TrainingError)
    assert exception_death(ValueError("nan")) is None


# ---------------------------------------------------------------- the version gate


def test_both_tested_rays_record_causes() -> None:
    assert compat.death_cause_support() is None


def test_a_ray_without_causes_gives_unknown_with_one_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # an older Ray (no node_death_info in its protobufs) is stood in for by its gate's answer
    monkeypatch.setattr(compat, "death_cause_support", lambda: "ray 2.9 records no cause")
    monkeypatch.setattr(late_causes, "_warned_unsupported", False)
    caplog.set_level(logging.WARNING, logger="statemachine.tune.late_causes")
    for _ in range(2):
        late = late_causes.LateCauses()
        late.ask("t1", 4, "ab" * 16, None)
        late.ask("t2", 4, "cd" * 16, None)
        assert late.pending == 0 and late.learned() == []
    warned = [r for r in caplog.records if "records no cause" in r.getMessage()]
    assert len(warned) == 1 and "'unknown'" in warned[0].getMessage()


# ---------------------------------------------------------------- a real Ray


@pytest.fixture(scope="module")
def actors(ray_cluster: None) -> Iterator[Any]:
    import ray

    @ray.remote(num_cpus=0, max_restarts=0)
    class Victim:
        def pid(self) -> int:
            return os.getpid()

        def wait(self) -> None:
            import time

            time.sleep(120)

    yield Victim


def _raised(ref: Any) -> BaseException:
    import ray

    with pytest.raises(rx.RayActorError) as caught:
        ray.get(ref, timeout=60)
    return caught.value


def test_a_sigkilled_worker_from_the_exception_and_from_the_gcs(actors: Any) -> None:
    import ray

    actor = actors.remote()
    pid = ray.get(actor.pid.remote(), timeout=60)
    pending = actor.wait.remote()
    os.kill(pid, signal.SIGKILL)
    exc = _raised(pending)
    death = exception_death(exc)
    assert death is not None and death.cause is DeathCause.WORKER_CRASHED, str(exc)
    # asked after the fact, as for an exception that said nothing: the GCS tells the same
    actor_id = actor._actor_id.hex()
    late = late_causes.LateCauses(timeout_s=30)
    late.ask("t1", 7, actor_id, None)
    late.wait(35)
    learned = late.learned()
    assert [(t, e.failure_seq, e.death.cause, e.source) for t, e in learned] == [
        ("t1", 7, DeathCause.WORKER_CRASHED, "state_api")]
    assert isinstance(learned[0][1], DeathCauseLearned)
    assert learned[0][1].death.ray_reason.startswith("WORKER_DIED")


def test_a_killed_actor_from_the_exception_and_not_from_the_gcs(actors: Any) -> None:
    import time

    import ray

    from statemachine.tune.ray_surface.deaths import actor_table_death

    actor = actors.remote()
    ray.get(actor.pid.remote(), timeout=60)
    pending = actor.wait.remote()
    ray.kill(actor, no_restart=True)
    exc = _raised(pending)
    death = exception_death(exc)
    assert death is not None and death.cause is DeathCause.KILLED, str(exc)
    actor_id = actor._actor_id.hex()
    for _ in range(60):  # the GCS records the kill
        dead, cause = actor_table_death(actor_id)
        if dead and cause:
            break
        time.sleep(0.5)
    assert dead and cause and cause["actor_died_error_context"]["reason"] == "RAY_KILL"
    # ... but a late lookup never takes it for a failure's cause: it is what a driver does
    # to a failed trial's actor (Tune releases or kills it), not why it failed
    assert late_causes.ask_ray(actor_id, None, False) is None


def test_an_actor_ray_does_not_know_tells_nothing(ray_cluster: None) -> None:
    assert late_causes.ask_ray("ff" * 16, None, False) is None
    assert late_causes.ask_ray(None, "ee" * 28, False) is None


def test_the_callback_records_the_iteration_and_a_cause_learned_late(
    actors: Any, tmp_path: Any
) -> None:
    """Through the seam on a real ``Trial``: an ``ActorUnavailableError`` (no cause) for an
    actor whose worker was SIGKILLed is decided ``unknown`` with the trial's iteration; the
    GCS's answer is recorded at a later step as ``DeathCauseLearned`` naming that failure."""
    import time

    import ray

    from statemachine.tune import EventLogCallback
    from tests.tune.test_tune_seam import make_trial, start
    from tests.tune.tunekit import stored_events

    actor = actors.remote()
    pid = ray.get(actor.pid.remote(), timeout=60)
    os.kill(pid, signal.SIGKILL)
    actor_id = actor._actor_id.hex()
    url = f"sqlite:///{tmp_path / 'log.db'}"
    callback = EventLogCallback(url=url)
    callback.setup()
    trial = make_trial(tmp_path, "late")
    callback.on_step_begin(iteration=0, trials=[trial])
    try:
        start(callback, trial)
        trial.temporary_state.restoring_from = None
        trial.run_metadata.last_result = {"training_iteration": 7}
        trial.handle_error(rx.ActorUnavailableError("Socket closed", bytes.fromhex(actor_id)))
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and callback._attempts.late.pending:
            callback.on_step_end(iteration=1, trials=[trial])
            time.sleep(0.2)
    finally:
        callback.on_experiment_end(trials=[trial])
    rows = stored_events(url, "late", trial.trial_id)
    failed = next(r for r in rows if r.type_name == "TrialFailed")
    assert isinstance(failed.event.error, ActorError)
    assert failed.event.error.cause is DeathCause.UNKNOWN and failed.event.iteration == 7
    assert failed.decision == "RECOVER"  # decided without the cause, as Ray does
    learned = [r.event for r in rows if isinstance(r.event, DeathCauseLearned)]
    assert [(e.failure_seq, e.death.cause, e.source) for e in learned] == [
        (failed.seq, DeathCause.WORKER_CRASHED, "state_api")]
