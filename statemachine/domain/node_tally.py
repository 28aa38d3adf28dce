"""Which node ate my restores? A per-node tally of what a log's events say happened there.

:func:`tally_nodes` folds each trial's events (to tell a start that restores from one that
starts from scratch) and counts, per node, attempts and failures by kind, worst node first,
and the actor deaths by cause (as known last: a cause Ray told after the failure,
``DeathCauseLearned``, replaces the ``unknown`` the failure was recorded with).

One rule counts: :meth:`TrialNodes.count`, one event of one trial into that trial's share
(per node its attempts and failures, and where each actor death was counted, so a cause
learned later moves it). An experiment's tally is the sum of its trials' shares
(:func:`tally_shares`), whatever order they are summed in: a share can be kept with a
trial's snapshot and continued with the events after it, and the sum still equals the tally
of the whole history.
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

    def sort_key(self) -> tuple[int, int, int, str, tuple[object, ...]]:
        """Worst first: restore failures, then all failures, then attempts (then the node,
        so the order never depends on which trial came first)."""
        return (-self.restore_failures, -self.failures, -self.attempts, self.node.key,
                _order(self.node))


class TrialNodes:
    """One trial's share of the per-node tally: per node what its attempts and failures
    did there (a :class:`NodeTally` whose ``trials`` is left empty), and where each of its
    actor deaths was counted, as what (a cause learned later moves it).

    Built by :meth:`count`, one event at a time in the trial's order; kept with the trial's
    snapshot (:meth:`to_dict`) and continued with the events after it.
    """

    __slots__ = ("deaths", "nodes")

    def __init__(self) -> None:
        self.nodes: dict[tuple[str | None, ...], NodeTally] = {}
        self.deaths: dict[int, tuple[tuple[str | None, ...], DeathCause]] = {}
        """Each actor death while training: its seq -> the node it was counted on, as what."""

    def count(self, seq: int, event: Any, restoring: bool) -> None:
        """Count the trial's event at ``seq`` (a start, a failure, a cause learned later;
        anything else is no attempt) where it ran; ``restoring``: a start that went to
        ``RESTORING``. The one rule of every per-node tally."""
        if isinstance(event, DeathCauseLearned):
            counted = self.deaths.get(event.failure_seq)
            if counted is not None and event.death.known:
                where = self.nodes[counted[0]]
                where.count_death(counted[1], -1)
                where.count_death(event.death.cause)
                self.deaths[event.failure_seq] = (counted[0], event.death.cause)
            return
        if not isinstance(event, (TrialStarted, TrialFailed)):
            return
        node = event.node or NodeRef()
        identity = _identity(node)
        tally = self.nodes.get(identity)
        if tally is None:
            tally = self.nodes[identity] = NodeTally(node)
        elif _better(node, tally.node):
            tally.node = node  # the same node id, described more fully
        if isinstance(event, TrialStarted):
            tally.attempts += 1
            tally.restore_attempts += restoring
            return
        error = event.error
        if isinstance(error, RestoreError):
            tally.restore_failures += 1
        elif isinstance(error, ActorError):
            tally.count_death(error.cause)
            self.deaths[seq] = (identity, error.cause)
        elif isinstance(error, AbortError):
            tally.other_failures += 1
        else:
            tally.training_failures += 1

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TrialNodes):
            return NotImplemented
        return self.nodes == other.nodes and self.deaths == other.deaths

    def __repr__(self) -> str:
        return f"TrialNodes(nodes={self.nodes!r}, deaths={self.deaths!r})"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (what a snapshot keeps): ``nodes`` as ``[node_id, node_ip,
        hostname, attempts, restore_attempts, training_failures, restore_failures,
        preemptions, actor_deaths, other_failures, {cause: n}]``, ``deaths`` as ``[seq,
        index of its node in nodes, cause]``."""
        index = {identity: i for i, identity in enumerate(self.nodes)}
        return {
            "nodes": [[t.node.node_id, t.node.node_ip, t.node.hostname, *_counts(t),
                       {cause.value: n for cause, n in t.causes.items()}]
                      for t in self.nodes.values()],
            "deaths": [[seq, index[identity], cause.value]
                       for seq, (identity, cause) in self.deaths.items()],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialNodes:
        """Rebuild a share from :meth:`to_dict` output (``KeyError``, ``TypeError``,
        ``ValueError`` or ``IndexError`` if it is not one)."""
        share = cls()
        identities = []
        for node_id, node_ip, hostname, *counts, causes in data["nodes"]:
            node = NodeRef.from_dict({"node_id": node_id, "node_ip": node_ip,
                                      "hostname": hostname})
            if len(counts) != len(_COUNTS) or not all(type(n) is int for n in counts):
                raise ValueError(f"node counts must be {len(_COUNTS)} integers")
            a, b, c, d, e, f, g = counts
            tally = NodeTally(node, a, b, c, d, e, f, g, set(),
                              {DeathCause(cause): int(n) for cause, n in causes.items()})
            identity = _identity(node)
            share.nodes[identity] = tally
            identities.append(identity)
        for seq, at, cause in data["deaths"]:
            share.deaths[int(seq)] = (identities[at], DeathCause(cause))
        return share


def tally_shares(shares: Iterable[tuple[str, TrialNodes]]) -> list[NodeTally]:
    """The per-node tally of ``(trial_id, share)`` pairs, in any order; worst node first."""
    tallies: dict[tuple[str | None, ...], NodeTally] = {}
    for trial_id, share in shares:
        for identity, part in share.nodes.items():
            tally = tallies.get(identity)
            if tally is None:
                tally = tallies[identity] = NodeTally(part.node)
            elif _better(part.node, tally.node):
                tally.node = part.node
            tally.attempts += part.attempts
            tally.restore_attempts += part.restore_attempts
            tally.training_failures += part.training_failures
            tally.restore_failures += part.restore_failures
            tally.preemptions += part.preemptions
            tally.actor_deaths += part.actor_deaths
            tally.other_failures += part.other_failures
            for cause, n in part.causes.items():
                left = tally.causes.get(cause, 0) + n
                if left:
                    tally.causes[cause] = left
                else:
                    tally.causes.pop(cause, None)
            tally.trials.add(trial_id)
    return sorted(tallies.values(), key=NodeTally.sort_key)


def tally_nodes(events: Iterable[tuple[str, Any]]) -> list[NodeTally]:
    """Per node, what ``(trial_id, event)`` pairs say happened there; worst node first.

    Each trial's events are folded (in the order given) to tell a start that restores from
    a checkpoint from one that starts from scratch; a trial's events after one that does not
    fold are not counted. Starts and failures whose node is not known are tallied under one
    ``unknown`` node (a log written before nodes were recorded has only those). Nodes are
    never merged on a guess: a failure that knows only an IP is its own row.
    """
    shares: dict[str, TrialNodes] = {}
    states: dict[str, TrialState] = {}
    halted: set[str] = set()
    for trial_id, event in events:
        if trial_id in halted:
            continue
        state = states.setdefault(trial_id, TrialState(trial_id))
        try:
            apply_compiled(state, event)
        except InvalidTransitionError:
            halted.add(trial_id)
            continue
        share = shares.get(trial_id)
        if share is None:
            share = shares[trial_id] = TrialNodes()
        share.count(state.seq, event, state.status is Status.RESTORING)
    return tally_shares(shares.items())


def tally_attempts(attempts: Iterable[tuple[str, int, Any, bool]]) -> list[NodeTally]:
    """:func:`tally_nodes` from the attempts alone, as recorded: ``(trial_id, seq, event,
    restoring)`` for each ``TrialStarted``, ``TrialFailed`` and ``DeathCauseLearned`` of a
    log, in order, where ``restoring`` says a start went to ``RESTORING`` (the status the log
    recorded after it). Equal to :func:`tally_nodes` of every event of a log that folds."""
    shares: dict[str, TrialNodes] = {}
    for trial_id, seq, event, restoring in attempts:
        share = shares.get(trial_id)
        if share is None:
            share = shares[trial_id] = TrialNodes()
        share.count(seq, event, restoring)
    return tally_shares(shares.items())


_COUNTS = ("attempts", "restore_attempts", "training_failures", "restore_failures",
           "preemptions", "actor_deaths", "other_failures")


def _counts(tally: NodeTally) -> list[int]:
    return [getattr(tally, name) for name in _COUNTS]


def _detail(node: NodeRef) -> int:
    return sum(value is not None for value in (node.node_id, node.node_ip, node.hostname))


def _order(node: NodeRef) -> tuple[object, ...]:
    """A total order of node descriptions (``None`` after any value)."""
    return tuple((value is None, value or "")
                 for value in (node.node_id, node.node_ip, node.hostname))


def _better(node: NodeRef, than: NodeRef) -> bool:
    """Whether ``node`` describes the same node better than ``than``: more fields known,
    and of two equally detailed descriptions the first in :func:`_order` (not the one seen
    first: the answer must not depend on the order the trials are summed in)."""
    detail, other = _detail(node), _detail(than)
    return detail > other or (detail == other and _order(node) < _order(than))


def _identity(node: NodeRef) -> tuple[str | None, ...]:
    """Rows are per node id; a node without one is told apart by everything it has."""
    if node.node_id:
        return (node.node_id,)
    return (None, node.node_ip, node.hostname)
