"""A trial's recorded life cut into attempts, from its events and their times.

An attempt runs from a ``TrialStarted`` to the event that ended it (a failure, completion,
pause, stop or requeue). An attempt that started from a checkpoint is a restore attempt: it
succeeded when the fold says it did (``RestoreSucceeded`` and no failure the policy in force
counted as a restore failure), failed when its failure counted as one. Its training time runs
from the restore (or the start of a fresh attempt) to its end. Nothing here reads a policy
other than the one recorded: the fold of the recorded events is the owner of what counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from statemachine.domain.compiled import apply_compiled
from statemachine.domain.events import (
    CheckpointSaved,
    Event,
    RestoreSucceeded,
    TrialCompleted,
    TrialFailed,
    TrialPaused,
    TrialResumed,
    TrialStarted,
    TrialStopped,
)
from statemachine.domain.failures import ActorError
from statemachine.domain.state import TrialState
from statemachine.domain.status import Status
from statemachine.exceptions import InvalidTransitionError

#: What ends an attempt, by event class.
_ENDS: dict[type[Event], str] = {
    TrialFailed: "failed", TrialCompleted: "completed", TrialPaused: "paused",
    TrialStopped: "stopped", TrialResumed: "requeued",
}


@dataclass
class Failure:
    """One recorded failure: where in the attempt, of what, and what it cost."""

    time: float
    restore: bool
    """Counted as a restore failure by the recorded fold."""
    preempted: bool
    signature: tuple[str, str, str]
    """``(kind, type, message)`` of the error."""
    iteration: int | None
    lost_s: float
    """Training time since the last checkpoint (or since the attempt began training)."""
    gave_up: bool
    recovery_s: float | None = None
    """From the failure to the next attempt training again (scheduling plus restores);
    ``None`` when no later attempt trained."""


@dataclass
class Attempt:
    """One run of a trial on a node."""

    index: int
    """Position of its ``TrialStarted`` in the trial's events (0-based)."""
    start: float
    node: str | None
    restoring: bool
    restore_number: int
    """1 for the first restore attempt of an episode, 2 for the retry after it, ..."""
    avoid_failed_nodes: bool
    previous_failed_node: str | None
    """The node of the restore attempt that failed just before this one (a retry)."""
    restore_ok: bool | None = None
    train_start: float | None = None
    end: float | None = None
    ended: str = "open"
    failure: Failure | None = None
    progress_s: float = 0.0
    """Training time up to the attempt's last checkpoint (work the next attempt keeps)."""

    @property
    def hours(self) -> float:
        """How long the attempt ran, in hours."""
        return max(0.0, (self.end if self.end is not None else self.start) - self.start) / 3600

    @property
    def train_hours(self) -> float:
        """How long it trained, in hours."""
        if self.train_start is None or self.end is None:
            return 0.0
        return max(0.0, self.end - self.train_start) / 3600


@dataclass
class TrialHistory:
    """A trial's recorded events, their times (seconds since the epoch) and attempts."""

    experiment: str
    trial_id: str
    events: tuple[Event, ...]
    times: tuple[float, ...]
    final: TrialState
    attempts: list[Attempt] = field(default_factory=list)
    checkpoint_gaps: list[float] = field(default_factory=list)
    """Seconds between a trial's consecutive checkpoints (or training start and the first)."""
    progress_s: float = 0.0
    """Training kept at the end (as of its latest checkpoint; all of it once completed)."""
    checkpoint_progress: dict[str, float] = field(default_factory=dict)
    """Training time behind each checkpoint, by path."""

    @property
    def failures(self) -> list[Failure]:
        """Its failures, in order."""
        return [a.failure for a in self.attempts if a.failure is not None]

    @property
    def training_failures(self) -> list[Failure]:
        """Failures while training that were not preemptions."""
        return [f for f in self.failures if not f.restore and not f.preempted]

    @property
    def attempt_hours(self) -> float:
        """Hours all its attempts ran."""
        return sum(a.hours for a in self.attempts)

    def deterministic(self) -> str | None:
        """Evidence that no budget saves this trial: every attempt that trained failed with
        the same error at the same iteration (at least twice, never completed); else None."""
        if self.final.status is Status.TERMINATED:
            return None
        trained = [a for a in self.attempts if a.train_start is not None]
        failed = self.training_failures
        if len(failed) < 2 or len(failed) != len(trained):
            return None
        keys = {(f.signature, f.iteration) for f in failed}
        if len(keys) != 1 or failed[0].iteration is None:
            return None
        (kind, type_name, message), iteration = next(iter(keys))
        return (f"{type_name} {message[:80]!r} ({kind}) at iteration {iteration} in "
                f"{len(failed)} of {len(failed)} attempts")


def history(experiment: str, trial_id: str, events: Sequence[Event],
            times: Sequence[float]) -> TrialHistory:
    """Cut ``events`` (with their ``times``) into attempts, folding them as recorded.

    The events are folded as far as they fold (a log's reader stops at a bad row already).
    """
    state = TrialState(trial_id)
    out = TrialHistory(experiment, trial_id, tuple(events), tuple(times), state)
    current: Attempt | None = None
    last_mark = 0.0  # time of the latest checkpoint or training start in the attempt
    restore_streak = 0
    failed_node: str | None = None
    progress = 0.0  # training kept, as of the attempt's start
    for index, (event, time) in enumerate(zip(events, times, strict=True)):
        before_restores = state.total_restore_failures
        policy = state.policy
        try:
            record = apply_compiled(state, event)
        except InvalidTransitionError:
            break
        if isinstance(event, TrialStarted):
            restoring = record.status_after is Status.RESTORING
            if restoring and event.restore_from is not None:
                progress = out.checkpoint_progress.get(event.restore_from, progress)
            elif not restoring:
                progress = 0.0
            current = Attempt(index, time, event.node.node_id if event.node else None,
                              restoring, restore_streak + 1 if restoring else 0,
                              policy.avoid_failed_nodes, failed_node if restoring else None)
            current.progress_s = progress
            if not restoring:
                current.train_start = last_mark = time
            out.attempts.append(current)
            continue
        if current is None or current.ended != "open":
            continue
        if isinstance(event, RestoreSucceeded):
            current.train_start = last_mark = time
        elif isinstance(event, CheckpointSaved) and current.train_start is not None:
            out.checkpoint_gaps.append(time - last_mark)
            current.progress_s += time - last_mark
            last_mark = time
            out.checkpoint_progress[event.checkpoint] = current.progress_s
        ended = _ENDS.get(type(event))
        if ended is None:
            continue
        current.end, current.ended = time, ended
        if isinstance(event, TrialFailed):
            restore = state.total_restore_failures > before_restores
            error = event.error
            preempted = isinstance(error, ActorError) and error.preempted
            trained = current.train_start is not None and not restore
            current.failure = Failure(
                time, restore, preempted, (error.kind, error.cause_type, error.message),
                event.iteration, time - last_mark if trained else 0.0,
                state.status is Status.ERROR)
            if current.restoring:
                current.restore_ok = not restore
            if restore:
                restore_streak += 1
                failed_node = current.node
            else:
                restore_streak, failed_node = 0, None
        else:
            if current.restoring and current.train_start is not None:
                current.restore_ok = True
            restore_streak, failed_node = 0, None
            if ended == "completed":
                current.progress_s += time - last_mark
    _recoveries(out)
    last = out.attempts[-1] if out.attempts else None
    out.progress_s = last.progress_s if last is not None else 0.0
    return out


def _recoveries(out: TrialHistory) -> None:
    """Each failure's time to the next attempt that trained."""
    attempts = out.attempts
    for i, attempt in enumerate(attempts):
        if attempt.failure is None:
            continue
        later = next((a for a in attempts[i + 1:] if a.train_start is not None), None)
        if later is not None and later.train_start is not None:
            attempt.failure.recovery_s = later.train_start - attempt.failure.time
