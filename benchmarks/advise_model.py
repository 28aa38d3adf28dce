"""Synthetic experiments from a known failure model, written through the public log API.

Used by the ``advise`` benchmark section and by tests/advise: each trial needs ``work_h``
hours of training, checkpoints every ``checkpoint_h``, fails while training at
``hazard_per_h`` per hour (a ``TrainingError``) and is preempted at ``preempt_per_h`` (an
``ActorError`` that Ray says was preempted); each restore from a checkpoint succeeds with
probability ``restore_p`` (``bad_node_p`` on the node ``node-bad``, when given). The first
``deterministic`` trials fail with the same error at the same iteration on every attempt.
The recorded run follows ``policy`` through the real state machine (the events are folded
as they are made, so the driver's decisions are the machine's). Events carry their own
times (``EventStore.append_batch(recorded_at=...)``, what ``ingest`` writes with): the log
holds hours of simulated training written in a moment.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timezone

from statemachine import (
    ActorError,
    CheckpointSaved,
    EventStore,
    NodeRef,
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
)
from statemachine.domain.compiled import apply_compiled
from statemachine.domain.events import Event
from statemachine.domain.state import TrialState
from statemachine.log.records import AppendRequest

ITERATION_S = 60.0
SCHEDULE_S = 5.0
RESTORE_S = 20.0


@dataclass(frozen=True)
class FailureModel:
    """The true parameters of a synthetic run."""

    trials: int = 40
    work_h: float = 1.0
    checkpoint_h: float = 0.1
    hazard_per_h: float = 0.5
    preempt_per_h: float = 0.2
    restore_p: float = 0.7
    bad_node_p: float | None = None
    nodes: int = 4
    deterministic: int = 1
    policy: RetryPolicy = field(default_factory=lambda: RetryPolicy(max_failures=1))


@dataclass
class Generated:
    """One trial's events and their times (seconds since the epoch)."""

    trial_id: str
    events: list[Event]
    times: list[float]


def generate(model: FailureModel, seed: int, start: float = 1.7e9) -> list[Generated]:
    """Every trial of a run of ``model``, under ``model.policy`` (seeded)."""
    rng = random.Random(seed)
    return [_trial(model, rng, f"t{i:05d}", start + 10 * i, i < model.deterministic)
            for i in range(model.trials)]


def _trial(model: FailureModel, rng: random.Random, trial_id: str, now: float,
           deterministic: bool) -> Generated:
    state = TrialState(trial_id)
    out = Generated(trial_id, [], [])

    def emit(event: Event) -> None:
        apply_compiled(state, event)
        out.events.append(event)
        out.times.append(round(now, 3))  # milliseconds: what a log's time column keeps

    emit(PolicySet(policy=model.policy))
    emit(TrialAdded(config={"lr": 0.1}))
    progress = {"": 0.0}  # checkpoint -> training hours behind it
    nodes = [f"node-{n}" for n in range(model.nodes - (model.bad_node_p is not None))]
    if model.bad_node_p is not None:
        nodes.append("node-bad")
    while state.status is Status.PENDING:
        now += SCHEDULE_S
        node = rng.choice([n for n in nodes if n not in state.excluded_nodes] or nodes)
        checkpoint = state.latest_checkpoint
        emit(TrialStarted(restore_from=checkpoint, node=NodeRef(node)))
        done = progress.get(checkpoint or "", 0.0) if checkpoint else 0.0
        if state.status is Status.RESTORING:
            now += RESTORE_S
            p = model.bad_node_p if node == "node-bad" and model.bad_node_p is not None \
                else model.restore_p
            if rng.random() >= p:
                emit(TrialFailed(error=RestoreError("builtins.OSError", "checkpoint unreadable"),
                                 node=NodeRef(node)))
                continue
            emit(RestoreSucceeded())
        rate = model.hazard_per_h + model.preempt_per_h
        to_failure = rng.expovariate(rate) if rate > 0 else float("inf")
        if deterministic:
            fail_at = 3.5 * model.checkpoint_h
            to_failure = max(fail_at - done, 1e-6) if done < fail_at else 1e-6
        left = model.work_h - done
        ran = min(to_failure, left)
        next_ckpt = (int(done / model.checkpoint_h + 1e-9) + 1) * model.checkpoint_h
        while next_ckpt <= done + ran + 1e-12 and next_ckpt < model.work_h - 1e-9:
            path = f"{trial_id}/ckpt-{next_ckpt:.4f}"
            now_ckpt = now + (next_ckpt - done) * 3600
            apply_compiled(state, CheckpointSaved(checkpoint=path))
            out.events.append(CheckpointSaved(checkpoint=path))
            out.times.append(round(now_ckpt, 3))
            progress[path] = next_ckpt
            next_ckpt += model.checkpoint_h
        now += ran * 3600
        if to_failure >= left:
            emit(TrialCompleted())
            break
        iteration = int((done + ran) * 3600 / ITERATION_S)
        if deterministic:
            error: TrainingError | ActorError = TrainingError(
                "builtins.ValueError", "loss is nan")
        elif rng.random() < model.hazard_per_h / rate:
            error = TrainingError("builtins.RuntimeError", f"CUDA error at step {iteration}")
        else:
            error = ActorError("ray.exceptions.RayActorError", "node preempted", preempted=True)
        emit(TrialFailed(error=error, node=NodeRef(node), iteration=iteration))
    return out


def write(store: EventStore, experiment: str, trials: list[Generated],
          policy: RetryPolicy) -> int:
    """Append ``trials`` as one driver session of ``experiment`` (one transaction)."""
    session = store.start_session(experiment, policy=policy, kind="fresh")
    requests: list[AppendRequest] = []
    times: list[datetime] = []
    for trial in trials:
        state = TrialState(trial.trial_id)
        for seq, (event, moment) in enumerate(zip(trial.events, trial.times, strict=True)):
            record = apply_compiled(state, event)
            requests.append(AppendRequest(trial.trial_id, event, seq, record, None))
            times.append(datetime.fromtimestamp(moment, tz=timezone.utc))
    store.append_batch(session, requests, returning=False, recorded_at=times)
    store.end_session(session, clean=True)
    return len(requests)
