"""Logs for the web view's tests and benchmark: many trials in every status, written with the
public API (``ExperimentLog.record_many``).

Trial ``n`` (``trial_00042``): starts on one of three machines and saves a checkpoint; every
5th fails training, fails its restore once (retried) and restores; every 7th fails training
(twice if it had not failed yet) and gives up (ERROR, failures 2 > max_failures 1); of the
others every 3rd completes (TERMINATED); the rest are RUNNING.
"""

from __future__ import annotations

from pathlib import Path

from statemachine.domain.events import (
    CheckpointSaved,
    Event,
    RestoreSucceeded,
    TrialAdded,
    TrialCompleted,
    TrialFailed,
    TrialStarted,
)
from statemachine.domain.failures import RestoreError, TrainingError
from statemachine.domain.nodes import NodeRef
from statemachine.domain.policy import RetryPolicy

EXPERIMENT = "many"
POLICY = RetryPolicy(max_failures=1, restore_retry_num=2)
MACHINES = [NodeRef(f"{i}{i}" * 28, f"10.0.0.{i}", f"worker-{i}") for i in (1, 2, 3)]


def trial_name(n: int) -> str:
    """The id of trial ``n``."""
    return f"trial_{n:05d}"


def expected_status(n: int) -> str:
    """The status trial ``n`` ends in."""
    if n % 7 == 0:
        return "ERROR"
    return "TERMINATED" if n % 3 == 0 else "RUNNING"


def life(n: int, name: str | None = None) -> list[tuple[str, Event]]:
    """Trial ``n``'s events (see the module's docstring)."""
    trial, node = name or trial_name(n), MACHINES[n % 3]
    events: list[Event] = [TrialAdded({"n": n}), TrialStarted(node=node), CheckpointSaved("c1")]
    if n % 5 == 0:
        events += [TrialFailed(TrainingError("builtins.ValueError", "loss is NaN"), node=node),
                   TrialStarted(node=node),
                   TrialFailed(RestoreError("builtins.OSError", "checkpoint unreadable"),
                               node=node),
                   TrialStarted(node=node), RestoreSucceeded()]
    if n % 7 == 0:
        cuda = TrialFailed(TrainingError("builtins.RuntimeError", "CUDA error"), node=node)
        events += [cuda] if n % 5 == 0 else [cuda, TrialStarted(node=node), RestoreSucceeded(),
                                             cuda]
    elif n % 3 == 0:
        events += [CheckpointSaved("c2"), TrialCompleted()]
    return [(trial, event) for event in events]


def write_many(db: Path, trials: int, *, experiment: str = EXPERIMENT,
               names: dict[int, str] | None = None) -> Path:
    """``trials`` trials (``names``: some of them named otherwise) in ``db``, closed cleanly."""
    from statemachine.log import ExperimentLog

    log = ExperimentLog.open(str(db), experiment, POLICY, sqlite_synchronous="OFF")
    try:
        for start in range(0, trials, 500):
            log.record_many([item for n in range(start, min(start + 500, trials))
                             for item in life(n, (names or {}).get(n))])
    finally:
        log.close()
    return db
