"""Write ``tests/data/fixture.db``: the event log the CLI tests and golden outputs read.

Run from the repository root: ``python tests/data/make_fixture.py`` (then regenerate the
golden outputs, see ``tests/cli/test_golden.py``). It records, through
:class:`statemachine.log.ExperimentLog` exactly as a driver does, two experiments:

``fixture_exp`` (policy: max_failures=1, restore_retry_num=2, on_restore_exhausted=
restart_from_scratch, preemptions not counted), six trials over two driver sessions:

- ``a_recovered``: a training failure (RECOVER, failure 1 of 1), a restore, completes.
- ``b_preempted_scratch``: a preemption (not counted), then its restore fails three times:
  two retries, then RESTART_FROM_SCRATCH; trains anew and completes.
- ``c_given_up``: a training failure, then restore failures # 1 (before the crash) and # 2,
  # 3 (after the resume): the retries are spent and failure 2 exceeds max_failures: GIVE_UP.
- ``d_paused``: paused and resumed by the scheduler, completes (no failure).
- ``e_stopped``: running through the crash, requeued by the new driver, stopped early.
- ``f_aborted``: a non-retryable failure (AbortError): GIVE_UP at once.

Where attempts ran (``nodes``): ``b_preempted_scratch`` and ``c_given_up`` record their nodes
(``NODE_A`` 10.0.0.7 took the preemption and three restore failures, ``NODE_B`` one; one
failure knows only its IP); the other trials record none, as a log written before nodes were
recorded, so their attempts count under ``unknown``.

Session 1 runs in a child process that dies (``os._exit``) without ending its session: the
crash. Session 2 (epoch 2) is the ``Tuner.restore`` driver; it ends cleanly.

``other_exp``: one clean trial in one clean session (so ``experiments`` lists two).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from statemachine.domain.events import (
    CheckpointSaved,
    CheckpointsDiscarded,
    RestoreSucceeded,
    TrialAdded,
    TrialCompleted,
    TrialFailed,
    TrialPaused,
    TrialResumed,
    TrialStarted,
    TrialStopped,
)
from statemachine.domain.failures import AbortError, ActorError, RestoreError, TrainingError
from statemachine.domain.nodes import NodeRef
from statemachine.domain.policy import ExhaustionAction, RetryPolicy
from statemachine.log import ExperimentLog

FIXTURE = Path(__file__).with_name("fixture.db")
EXPERIMENT = "fixture_exp"
POLICY = RetryPolicy(
    max_failures=1,
    restore_retry_num=2,
    on_restore_exhausted=ExhaustionAction.RESTART_FROM_SCRATCH,
)
NODE_A = NodeRef("a7" * 28, "10.0.0.7", "worker-a")
NODE_B = NodeRef("b8" * 28, "10.0.0.8", "worker-b")


def restore_failed(message: str, node: NodeRef | None = None) -> TrialFailed:
    """A restore that failed because the node holding the checkpoint went away."""
    return TrialFailed(RestoreError("builtins.FileNotFoundError", message,
                                    "Traceback (most recent call last): ...\n"), node=node)


def training_failed(message: str) -> TrialFailed:
    """The user's training code raised."""
    return TrialFailed(TrainingError("builtins.RuntimeError", message,
                                     "Traceback (most recent call last): ...\n"))


def session_one(db: Path) -> None:
    """The first driver: records, then dies without ending its session."""
    log = ExperimentLog.open(str(db), EXPERIMENT, POLICY, storage_path="/tmp/ray_results/fx")
    for trial in ("a_recovered", "b_preempted_scratch", "c_given_up", "d_paused",
                  "e_stopped", "f_aborted"):
        log.record(trial, TrialAdded({"lr": 0.01, "trial": trial}))
    for trial in ("a_recovered", "b_preempted_scratch", "c_given_up", "d_paused"):
        node = {"b_preempted_scratch": NODE_A, "c_given_up": NODE_B}.get(trial)
        log.record(trial, TrialStarted(node=node))
        log.record(trial, CheckpointSaved(f"{trial}/checkpoint_000000"))
    log.record("a_recovered", training_failed("loss is NaN at step 120"))
    log.record("b_preempted_scratch", TrialFailed(ActorError(
        "ray.exceptions.ActorDiedError", "node 10.0.0.7 was preempted (spot instance)",
        preempted=True), node=NODE_A))
    log.record("c_given_up", TrialFailed(training_failed("CUDA out of memory").error,
                                         node=NODE_B))
    log.record("d_paused", TrialPaused())
    log.record("a_recovered", TrialStarted())
    log.record("a_recovered", RestoreSucceeded())
    log.record("c_given_up", TrialStarted(node=NODE_A))
    log.record("c_given_up", restore_failed("checkpoint_000000: no such file on node 10.0.0.7",
                                            NODE_A))
    log.record("e_stopped", TrialStarted())
    log.record("b_preempted_scratch", TrialStarted())
    log.record("d_paused", TrialResumed())
    log.record("f_aborted", TrialStarted())
    log.record("f_aborted", TrialFailed(AbortError(
        "ray.tune.error._AbortTrialExecution", "trainable could not be created")))
    sys.stdout.flush()
    os._exit(3)  # the driver crashes: no snapshot, no session end


def session_two(db: Path) -> None:
    """The resumed driver (``Tuner.restore``): takes epoch 2 and ends cleanly."""
    log = ExperimentLog.open(str(db), EXPERIMENT, POLICY, storage_path="/tmp/ray_results/fx")
    # Ray requeues the trials that were live when the driver died.
    log.record("e_stopped", TrialResumed())
    log.record("b_preempted_scratch", TrialResumed())
    for attempt, node in ((2, NODE_A), (3, NodeRef(node_ip="10.0.0.8"))):
        log.record("c_given_up", TrialStarted(node=node))
        log.record("c_given_up", restore_failed(f"checkpoint_000000: attempt {attempt}: "
                                                "object lost", node))
    for node in (NODE_A, NODE_B, NODE_A):
        log.record("b_preempted_scratch", TrialStarted(node=node))
        log.record("b_preempted_scratch", restore_failed("checkpoint_000000 is corrupted",
                                                         node))
    log.record("b_preempted_scratch", CheckpointsDiscarded(
        ("b_preempted_scratch/checkpoint_000000",), deleted=False,
        reason="restart_from_scratch"))
    log.record("b_preempted_scratch", TrialStarted(node=NODE_B))
    log.record("b_preempted_scratch", CheckpointSaved("b_preempted_scratch/checkpoint_000001"))
    log.record("b_preempted_scratch", TrialCompleted())
    log.record("a_recovered", CheckpointSaved("a_recovered/checkpoint_000001"))
    log.record("a_recovered", TrialCompleted())
    log.record("d_paused", TrialStarted())
    log.record("d_paused", RestoreSucceeded())
    log.record("d_paused", TrialCompleted())
    log.record("e_stopped", TrialStarted())
    log.record("e_stopped", TrialStopped("stopper: metric plateaued"))
    log.close(clean=True)

    other = ExperimentLog.open(str(db), "other_exp", RetryPolicy())
    other.record("only_trial", TrialAdded({}))
    other.record("only_trial", TrialStarted())
    other.record("only_trial", TrialCompleted())
    other.close(clean=True)


def main() -> int:
    """Write the fixture afresh (session 1 in a child process that crashes)."""
    if len(sys.argv) > 1 and sys.argv[1] == "--session-one":
        session_one(Path(sys.argv[2]))
        return 1  # unreachable: session_one exits
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else FIXTURE
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{target}{suffix}").unlink(missing_ok=True)
    child = subprocess.run([sys.executable, __file__, "--session-one", str(target)],
                           check=False)
    if child.returncode != 3:
        print(f"session one did not crash as planned (exit {child.returncode})",
              file=sys.stderr)
        return 1
    session_two(target)
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
