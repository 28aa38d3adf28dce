"""Driver processes for the multi-process tests (fencing, restart survival).

``python driver_child.py fence-old URL``: open the experiment, print ``READY``, then record
events for trial ``old`` until an append fails; print ``ACK <event id>`` after each one and
``FENCED <error type> <epoch> <current epoch>`` at the end.
``python driver_child.py fence-new URL N``: open the experiment (fencing the old driver), print
``EPOCH <epoch>``, record N events for trial ``new``, close.
``python driver_child.py restore-failures URL``: record a trial into its second restore failure,
print ``STATE <json>``, then wait to be killed.
``python driver_child.py resume URL``: reopen, print ``STATE <json>``, then record two more
restore attempts that fail and print ``DECISION <decision> <json counters>`` for each.
"""

from __future__ import annotations

import json
import sys
import time
import uuid

from statemachine import (
    CheckpointSaved,
    RestoreError,
    RetryPolicy,
    TrainingError,
    TrialAdded,
    TrialFailed,
    TrialStarted,
)
from statemachine.exceptions import StoreError
from statemachine.log import ExperimentLog

POLICY = RetryPolicy(max_failures=1, restore_retry_num=3)


def restore_failure() -> TrialFailed:
    return TrialFailed(error=RestoreError("ray.exceptions.RayActorError", "node died in restore"))


def fence_old(url: str) -> None:
    log = ExperimentLog.open(url, "fenced", RetryPolicy(max_failures=-1))
    log.record("old", TrialAdded())
    log.record("old", TrialStarted())
    print("READY", flush=True)
    n = 0
    while True:
        event_id = uuid.uuid4().hex
        try:
            log.record("old", CheckpointSaved(f"ckpt_{n}"), event_id=event_id)
        except StoreError as exc:
            print(f"FENCED {type(exc).__name__} {getattr(exc, 'epoch', '')} "
                  f"{getattr(exc, 'current_epoch', '')}", flush=True)  # fmt: skip
            log.close(clean=False)
            return
        print(f"ACK {event_id}", flush=True)
        n += 1


def fence_new(url: str, count: int) -> None:
    with ExperimentLog.open(url, "fenced", RetryPolicy(max_failures=-1)) as log:
        print(f"EPOCH {log.session.epoch}", flush=True)
        log.record("new", TrialAdded())
        log.record("new", TrialStarted())
        for n in range(count):
            log.record("new", CheckpointSaved(f"new_{n}"))


def _state(log: ExperimentLog) -> str:
    state = log.state("t1")
    assert state is not None
    return json.dumps(state.to_dict())


def restore_failures(url: str) -> None:
    log = ExperimentLog.open(url, "restarts", POLICY)
    log.record("t1", TrialAdded())
    log.record("t1", TrialStarted())
    log.record("t1", CheckpointSaved("ckpt_1"))
    log.record("t1", TrialFailed(error=TrainingError("builtins.RuntimeError", "oom")))
    for _ in range(2):
        log.record("t1", TrialStarted())
        log.record("t1", restore_failure())
    print(f"STATE {_state(log)}", flush=True)
    time.sleep(600)  # killed here, without closing anything


def resume(url: str) -> None:
    log = ExperimentLog.open(url, "restarts", POLICY)
    print(f"STATE {_state(log)}", flush=True)
    for _ in range(2):
        log.record("t1", TrialStarted())
        record = log.record("t1", restore_failure())
        print(f"DECISION {record.decision} {json.dumps(record.counters._asdict())}", flush=True)
    log.close()


if __name__ == "__main__":
    command, url, *rest = sys.argv[1:]
    if command == "fence-old":
        fence_old(url)
    elif command == "fence-new":
        fence_new(url, int(rest[0]))
    elif command == "restore-failures":
        restore_failures(url)
    elif command == "resume":
        resume(url)
    else:
        raise SystemExit(f"unknown command {command!r}")
