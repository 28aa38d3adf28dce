"""Property: a rehydrated state always equals a full replay, whatever was recorded and when
the driver restarted (cleanly, or as after a crash, with any snapshot interval)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statemachine import (
    AbortError,
    ActorError,
    CheckpointSaved,
    CheckpointsDiscarded,
    Event,
    ExhaustionAction,
    InvalidTransitionError,
    PolicySet,
    RestoreError,
    RestoreSucceeded,
    RetryPolicy,
    TrainingError,
    TrialAdded,
    TrialCompleted,
    TrialFailed,
    TrialPaused,
    TrialReset,
    TrialResumed,
    TrialStarted,
    TrialStopped,
)
from statemachine.log import EventStore, ExperimentLog, rehydrate, replay_experiment, verify

TRIALS = ["a", "b", "c", "d"]

policies = st.builds(
    RetryPolicy,
    max_failures=st.integers(-1, 3),
    restore_retry_num=st.integers(0, 3),
    count_preemption_as_failure=st.booleans(),
    max_preemptions=st.none() | st.integers(0, 2),
    on_restore_exhausted=st.sampled_from(list(ExhaustionAction)),
)


def catalogue(policy: RetryPolicy) -> list[Event]:
    """Every kind of event, in a few variants (a step picks one valid for the trial)."""
    return [
        TrialAdded(config={"lr": 0.1}),
        TrialStarted(),
        TrialStarted(restore_from="c1"),
        RestoreSucceeded(),
        CheckpointSaved("c1"),
        CheckpointSaved("c2"),
        CheckpointSaved("c3"),
        TrialPaused(),
        TrialResumed(),
        TrialCompleted(),
        TrialStopped(reason="scheduler"),
        TrialFailed(error=RestoreError("builtins.OSError", "restore")),
        TrialFailed(error=RestoreError("builtins.OSError", "restore again")),
        TrialFailed(error=TrainingError("builtins.ValueError", "train")),
        TrialFailed(error=ActorError("ray.ActorDiedError", "gone", preempted=True)),
        TrialFailed(error=ActorError("ray.ActorDiedError", "gone", preempted=False)),
        TrialFailed(error=AbortError("builtins.TypeError", "bad trainable")),
        CheckpointsDiscarded(checkpoints=("c1",)),
        TrialReset(from_scratch=False),
        TrialReset(from_scratch=True),
        PolicySet(policy=policy.replace(max_failures=policy.max_failures + 1)),
    ]


#: The events a step may draw for a trial: ``(log, trial, k) -> candidates``.
Candidates = Callable[[ExperimentLog, str, int], list[Event]]


def _catalogue_of(log: ExperimentLog, trial: str, k: int) -> list[Event]:
    return catalogue(log.policy)


def pick(log: ExperimentLog, trial: str, k: int,
         candidates: Candidates = _catalogue_of) -> Event | None:
    """The ``k``-th (mod n) event of ``candidates`` (the catalogue) valid for the trial now."""
    valid = []
    for event in candidates(log, trial, k):
        try:
            log.preview(trial, event)
        except InvalidTransitionError:
            continue
        valid.append(event)
    return valid[k % len(valid)] if valid else None


choice = st.integers(0, 10_000)
record = st.tuples(st.just("record"), st.sampled_from(TRIALS), choice)
batch = st.tuples(
    st.just("batch"),
    st.lists(st.sampled_from(TRIALS), min_size=1, max_size=4, unique=True),
    st.lists(choice, min_size=4, max_size=4),
    st.booleans(),
)
reopen = st.tuples(st.just("reopen"), st.integers(1, 6), st.booleans())
steps = st.lists(st.one_of(record, record, record, record, batch, reopen), min_size=20, max_size=80)


def batch_items(log: ExperimentLog, step: tuple,
                candidates: Candidates = _catalogue_of) -> list[tuple[str, Any]]:
    """The events of a ``("batch", trials, ks, spoil)`` step: one per trial that has a valid
    one, and when ``spoil`` two invalid ones, so the whole batch must be refused."""
    _, trials, ks, spoil = step
    items = [(t, pick(log, t, k, candidates)) for t, k in zip(trials, ks, strict=False)]
    items = [(t, e) for t, e in items if e is not None]
    if spoil:
        items.append((trials[0], RestoreSucceeded()))
        items.append((trials[0], RestoreSucceeded()))
    return items


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy=policies, snapshot_every=st.integers(1, 6), script=steps)
def test_rehydration_equals_full_replay(
    policy: RetryPolicy, snapshot_every: int, script: list[tuple]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = EventStore.open(Path(tmp) / "events.db", sqlite_synchronous="OFF")
        log = ExperimentLog.open(store, "exp", policy, snapshot_every=snapshot_every)
        for step in script:
            if step[0] == "record":
                event = pick(log, step[1], step[2])
                if event is not None:
                    log.record(step[1], event)
            elif step[0] == "batch":
                items, spoil = batch_items(log, step), step[3]
                before = log.states()
                try:
                    log.record_many(items)
                except InvalidTransitionError:
                    assert spoil and log.states() == before
            else:
                live = log.states()
                log.close(clean=step[2])
                log = ExperimentLog.open(store, "exp", policy, snapshot_every=step[1])
                assert log.states() == live
        live = log.states()
        replayed = {t: r.state for t, r in replay_experiment(store, "exp").items()}
        assert all(r.halted_at is None for r in replay_experiment(store, "exp").values())
        assert rehydrate(store, "exp") == replayed == live
        assert verify(store, "exp").ok
        log.close()
        assert rehydrate(store, "exp") == live
        store.close()
