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

from collections.abc import Iterable, Iterator
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
    def from_dict(cls, data: Any) -> TrialNodes:
        """Rebuild a share from :meth:`to_dict` output (``ValueError`` if it is not one)."""
        rows = checked_share(data)
        if rows is None:
            raise ValueError("not a trial's node share")
        share = cls()
        identities = []
        for node_id, node_ip, hostname, a, b, c, d, e, f, g, causes in rows:
            node = NodeRef(node_id, node_ip, hostname)
            identity = _identity(node)
            share.nodes[identity] = NodeTally(node, a, b, c, d, e, f, g, set(), {
                _CAUSES[cause]: n for cause, n in causes.items()})
            identities.append(identity)
        for seq, at, cause in data["deaths"]:
            share.deaths[seq] = (identities[at], _CAUSES[cause])
        return share


def checked_share(data: Any) -> list[list[Any]] | None:
    """The node rows of a share's JSON form (:meth:`TrialNodes.to_dict`), or ``None`` if
    ``data`` is not one (a stored share is a cache: anything may be there)."""
    if type(data) is not dict:
        return None
    rows, deaths = data.get("nodes"), data.get("deaths")
    if type(rows) is not list or type(deaths) is not list:
        return None
    for row in rows:
        if type(row) is not list or len(row) != 11:
            return None
        node_id, node_ip, hostname, a, b, c, d, e, f, g, causes = row
        if not ((node_id is None or type(node_id) is str)
                and (node_ip is None or type(node_ip) is str)
                and (hostname is None or type(hostname) is str)
                and type(a) is int and type(b) is int and type(c) is int and type(d) is int
                and type(e) is int and type(f) is int and type(g) is int
                and type(causes) is dict):
            return None
        for cause, n in causes.items():
            if cause not in _CAUSES or type(n) is not int:
                return None
    for death in deaths:
        if (type(death) is not list or len(death) != 3 or type(death[0]) is not int
                or type(death[1]) is not int or not 0 <= death[1] < len(rows)
                or death[2] not in _CAUSES):
            return None
    return rows


class NodeSum:
    """An experiment's per-node tally being summed from its trials' shares, in any order
    (each share added in its JSON form: a stored share needs no decoding)."""

    def __init__(self) -> None:
        self._tallies: dict[tuple[str | None, ...], NodeTally] = {}
        self._nodes: dict[tuple[str | None, str | None, str | None], NodeRef] = {}

    def add(self, trial_id: str, share: TrialNodes) -> None:
        """Add a trial's share."""
        self.add_rows(trial_id, share.to_dict()["nodes"])

    def add_rows(self, trial_id: str, rows: list[list[Any]]) -> None:
        """Add a trial's share as :func:`checked_share` returned its node rows."""
        tallies, nodes = self._tallies, self._nodes
        for node_id, node_ip, hostname, a, b, c, d, e, f, g, causes in rows:
            identity = (node_id,) if node_id else (None, node_ip, hostname)
            tally = tallies.get(identity)
            described = (node_id, node_ip, hostname)
            node = nodes.get(described)
            if node is None:
                node = nodes[described] = NodeRef(node_id, node_ip, hostname)
            if tally is None:
                tally = tallies[identity] = NodeTally(node)
            elif node is not tally.node and _better(node, tally.node):
                tally.node = node
            tally.attempts += a
            tally.restore_attempts += b
            tally.training_failures += c
            tally.restore_failures += d
            tally.preemptions += e
            tally.actor_deaths += f
            tally.other_failures += g
            if causes:
                counted = tally.causes
                for name, n in causes.items():
                    cause = _CAUSES[name]
                    left = counted.get(cause, 0) + n
                    if left:
                        counted[cause] = left
                    else:
                        counted.pop(cause, None)
            tally.trials.add(trial_id)

    def result(self) -> list[NodeTally]:
        """The tally, worst node first."""
        return sorted(self._tallies.values(), key=NodeTally.sort_key)


def tally_shares(shares: Iterable[tuple[str, TrialNodes]]) -> list[NodeTally]:
    """The per-node tally of ``(trial_id, share)`` pairs, in any order; worst node first."""
    total = NodeSum()
    for trial_id, share in shares:
        total.add(trial_id, share)
    return total.result()


def tally_nodes(events: Iterable[tuple[str, Any]]) -> list[NodeTally]:
    """Per node, what ``(trial_id, event)`` pairs say happened there; worst node first.

    Each trial's events are folded (in the order given) to tell a start that restores from
    a checkpoint from one that starts from scratch; a trial's events after one that does not
    fold are not counted. Starts and failures whose node is not known are tallied under one
    ``unknown`` node (a log written before nodes were recorded has only those). Nodes are
    never merged on a guess: a failure that knows only an IP is its own row.
    """
    return tally_attempts(_folded_attempts(events))


def _folded_attempts(events: Iterable[tuple[str, Any]]) -> Iterator[tuple[str, int, Any, bool]]:
    """``events`` as :func:`tally_attempts` takes them, each trial folded to tell a start that
    restores (its events after one that does not fold left out)."""
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
        yield trial_id, state.seq, event, state.status is Status.RESTORING


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


_CAUSES = {cause.value: cause for cause in DeathCause}
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
