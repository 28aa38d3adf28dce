"""A driver that records events until it is killed (run by test_crash_safety.py).

Usage: ``python crash_child.py URL SEED``. Before each append it prints an intent line
``I <json: event ids and events>``, after the append returned (acknowledged) a line ``A``.
"""

from __future__ import annotations

import json
import random
import sys
import uuid

from statemachine import (
    CheckpointSaved,
    Event,
    PolicySet,
    RestoreError,
    RestoreSucceeded,
    RetryPolicy,
    Status,
    TrainingError,
    TrialAdded,
    TrialCompleted,
    TrialFailed,
    TrialStarted,
    encode_event,
)
from statemachine.log import ExperimentLog

EXPERIMENT = "crash"
POLICY = RetryPolicy(max_failures=-1, restore_retry_num=2)
LIVE_TRIALS = 6


def next_event(status: Status, rng: random.Random, n: int) -> Event | None:
    """A valid next event for a trial in ``status`` (``None``: the trial has ended)."""
    if status is Status.PENDING:
        return TrialStarted()
    if status is Status.RUNNING:
        return rng.choice(
            [
                CheckpointSaved(f"ckpt_{n}"),
                CheckpointSaved(f"ckpt_{n}"),
                TrialFailed(error=TrainingError("builtins.ValueError", f"loss {n}")),
                TrialCompleted(),
            ]
        )
    if status is Status.RESTORING:
        return rng.choice(
            [RestoreSucceeded(), TrialFailed(error=RestoreError("builtins.OSError", f"io {n}"))]
        )
    return None


def main() -> None:
    url, seed = sys.argv[1], int(sys.argv[2])
    rng = random.Random(seed)
    log = ExperimentLog.open(url, EXPERIMENT, POLICY, snapshot_every=7)
    print("READY", flush=True)
    n = 0
    while True:
        states = log.states()
        live = [t for t, s in sorted(states.items()) if not s.status.is_terminal]
        items: list[tuple[str, Event]] = []
        if len(live) < LIVE_TRIALS:
            trial = f"t{len(states):04d}"
            items += [(trial, PolicySet(policy=POLICY)), (trial, TrialAdded(config={"n": n}))]
        for trial in rng.sample(live, k=min(len(live), rng.choice([1, 1, 1, 3, 6]))):
            event = next_event(states[trial].status, rng, n)
            if event is not None:
                items.append((trial, event))
            n += 1
        ids = [uuid.uuid4().hex for _ in items]
        intent = {"ids": ids, "events": [[t, *encode_event(e)] for t, e in items]}
        print("I " + json.dumps(intent), flush=True)
        if len(items) == 1:
            log.record(items[0][0], items[0][1], event_id=ids[0])
        else:
            log.record_many(items, event_ids=ids)
        print("A", flush=True)


if __name__ == "__main__":
    main()
