"""Which node ate my restores? A per-node tally of what a log's events say happened there.

:func:`tally_nodes` folds each trial's events (to tell a start that restores from one that
starts from scratch) and counts, per node, attempts and failures by kind, worst node first,
and the actor deaths by cause (as known last: a cause Ray told after the failure,
``DeathCauseLearned``, replaces the ``unknown`` the failure was recorded with).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from statemachine.domain.compiled import apply_compiled
from statemachine.domain.death import DeathCause
from statemachine.domain.events import DeathCauseLearned, TrialFailed, TrialStarted
from statemachine.domain.failures import AbortError, ActorError, RestoreError
from statemachine.domain.nodes import NodeRef
from statemachine.domain.state import TrialState
from statemachine.domain.status import Status
from statemachine.exceptions import InvalidTransitionError


@dataclass(slots=True)
class NodeTally:
    """What happened on one node over an experiment (or a set of trials)."""

    node: NodeRef
    attempts: int = 0
    """Actors started there (``TrialStarted``)."""
    restore_attempts: int = 0
    """Of those, attempts that restored from a checkpoint."""
    training_failures: int = 0
    restore_failures: int = 0
    preemptions: int = 0
    actor_deaths: int = 0
    """Actors that died while training, not preempted (deaths while restoring are restore
    failures)."""
    other_failures: int = 0
    """Failures that are never retried (``AbortError``)."""
    trials: set[str] = field(default_factory=set)
    causes: dict[DeathCause, int] = field(default_factory=dict)
    """The actor deaths (:attr:`actor_deaths`, not the preemptions) by cause; only causes
    that occurred."""

    def count_death(self, cause: DeathCause, by: int = 1) -> None:
        """Count (``by=-1``: uncount) an actor death of ``cause`` while training."""
        if cause is DeathCause.PREEMPTED:
            self.preemptions += by
            return
        self.actor_deaths += by
        left = self.causes.get(cause, 0) + by
        if left:
            self.causes[cause] = left
        else:
            self.causes.pop(cause, None)

    @property
    def failures(self) -> int:
        """Every failure recorded on this node."""
        return (self.training_failures + self.restore_failures + self.preemptions
                + self.actor_deaths + self.other_failures)

    def sort_key(self) -> tuple[int, int, int, str]:
        """Worst first: restore failures, then all failures, then attempts."""
        return (-self.restore_failures, -self.failures, -self.attempts, self.node.key)


def tally_nodes(events: Iterable[tuple[str, Any]]) -> list[NodeTally]:
    """Per node, what ``(trial_id, event)`` pairs say happened there; worst node first.

    Each trial's events are folded (in the order given) to tell a start that restores from
    a checkpoint from one that starts from scratch; a trial's events after one that does not
    fold are not counted. Starts and failures whose node is not known are tallied under one
    ``unknown`` node (a log written before nodes were recorded has only those). Nodes are
    never merged on a guess: a failure that knows only an IP is its own row.
    """
    tallies: dict[tuple[str | None, ...], NodeTally] = {}
    states: dict[str, TrialState] = {}
    halted: set[str] = set()
    # each actor death while training: (trial, its seq) -> where it was counted, as what
    deaths: dict[tuple[str, int], tuple[NodeTally, DeathCause]] = {}
    for trial_id, event in events:
        if trial_id in halted:
            continue
        state = states.setdefault(trial_id, TrialState(trial_id))
        try:
            apply_compiled(state, event)
        except InvalidTransitionError:
            halted.add(trial_id)
            continue
        _count(tallies, deaths, trial_id, state.seq, event,
               state.status is Status.RESTORING)
    return sorted(tallies.values(), key=NodeTally.sort_key)


def tally_attempts(attempts: Iterable[tuple[str, int, Any, bool]]) -> list[NodeTally]:
    """:func:`tally_nodes` from the attempts alone, as recorded: ``(trial_id, seq, event,
    restoring)`` for each ``TrialStarted``, ``TrialFailed`` and ``DeathCauseLearned`` of a
    log, in order, where ``restoring`` says a start went to ``RESTORING`` (the status the log
    recorded after it). Equal to :func:`tally_nodes` of every event of a log that folds."""
    tallies: dict[tuple[str | None, ...], NodeTally] = {}
    deaths: dict[tuple[str, int], tuple[NodeTally, DeathCause]] = {}
    for trial_id, seq, event, restoring in attempts:
        _count(tallies, deaths, trial_id, seq, event, restoring)
    return sorted(tallies.values(), key=NodeTally.sort_key)


def _count(tallies: dict[tuple[str | None, ...], NodeTally],
           deaths: dict[tuple[str, int], tuple[NodeTally, DeathCause]], trial_id: str,
           seq: int, event: Any, restoring: bool) -> None:
    """Count one event at ``seq`` (a start, a failure, a cause learned later; anything else
    is no attempt) where it ran."""
    if isinstance(event, DeathCauseLearned):
        counted = deaths.get((trial_id, event.failure_seq))
        if counted is not None and event.death.known:
            counted[0].count_death(counted[1], -1)
            counted[0].count_death(event.death.cause)
            deaths[(trial_id, event.failure_seq)] = (counted[0], event.death.cause)
        return
    if not isinstance(event, (TrialStarted, TrialFailed)):
        return
    node = event.node or NodeRef()
    tally = tallies.get(_identity(node))
    if tally is None:
        tally = tallies[_identity(node)] = NodeTally(node)
    elif _detail(node) > _detail(tally.node):
        tally.node = node  # the same node id, described more fully
    tally.trials.add(trial_id)
    if isinstance(event, TrialStarted):
        tally.attempts += 1
        tally.restore_attempts += restoring
        return
    error = event.error
    if isinstance(error, RestoreError):
        tally.restore_failures += 1
    elif isinstance(error, ActorError):
        tally.count_death(error.cause)
        deaths[(trial_id, seq)] = (tally, error.cause)
    elif isinstance(error, AbortError):
        tally.other_failures += 1
    else:
        tally.training_failures += 1


def _detail(node: NodeRef) -> int:
    return sum(value is not None for value in (node.node_id, node.node_ip, node.hostname))


def _identity(node: NodeRef) -> tuple[str | None, ...]:
    """Rows are per node id; a node without one is told apart by everything it has."""
    if node.node_id:
        return (node.node_id,)
    return (None, node.node_ip, node.hostname)
