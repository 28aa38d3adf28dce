"""Where an attempt ran: the node of a trial's actor, and a per-node tally of what happened.

A :class:`NodeRef` is what the Ray adapter could learn about a node (its Ray node id, IP and
hostname); every field it could not learn is ``None``, never guessed. :func:`tally_nodes`
answers "which node ate my restores?" from a log's events, worst node first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from statemachine.exceptions import EventDecodeError

_FIELDS = ("node_id", "node_ip", "hostname")


@dataclass(frozen=True, slots=True)
class NodeRef:
    """A cluster node as far as it is known (``None``: not known).

    Attributes:
        node_id: Ray's node id (hex).
        node_ip: the node's IP address.
        hostname: the node's hostname.
    """

    node_id: str | None = None
    node_ip: str | None = None
    hostname: str | None = None

    @property
    def known(self) -> bool:
        """Whether anything at all is known about the node."""
        return any(getattr(self, name) is not None for name in _FIELDS)

    @property
    def key(self) -> str:
        """What identifies the node in a tally: its id, else its IP, else its hostname."""
        return self.node_id or self.node_ip or self.hostname or "unknown"

    def describe(self) -> str:
        """``node 10.0.0.7 (node-id 3f2a...)``: what a person reads."""
        where = self.node_ip or self.hostname or "unknown"
        short = short_node_id(self.node_id)
        return f"node {where} (node-id {short})" if short else f"node {where}"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of this node."""
        return {name: getattr(self, name) for name in _FIELDS}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NodeRef:
        """Rebuild a node from :meth:`to_dict` output; unknown keys or non-strings refused."""
        unknown = set(data) - set(_FIELDS)
        if unknown:
            raise EventDecodeError(f"node has unknown field(s): {', '.join(sorted(unknown))}")
        values = {name: data.get(name) for name in _FIELDS}
        for name, value in values.items():
            if value is not None and not isinstance(value, str):
                raise EventDecodeError(f"node field {name!r} must be a string or null, "
                                       f"got {value!r}")
        return cls(**values)


def short_node_id(node_id: str | None) -> str | None:
    """The first 12 hex digits of a node id, as Ray's own messages abbreviate it."""
    if not node_id:
        return None
    return node_id if len(node_id) <= 12 else f"{node_id[:12]}..."


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
    from statemachine.domain.events import TrialFailed, TrialStarted
    from statemachine.domain.failures import AbortError, ActorError, RestoreError
    from statemachine.domain.machine import apply
    from statemachine.domain.state import TrialState
    from statemachine.domain.status import Status
    from statemachine.exceptions import InvalidTransitionError

    tallies: dict[tuple[str | None, ...], NodeTally] = {}
    states: dict[str, TrialState] = {}
    halted: set[str] = set()
    for trial_id, event in events:
        if trial_id in halted:
            continue
        state = states.setdefault(trial_id, TrialState(trial_id))
        try:
            apply(state, event)
        except InvalidTransitionError:
            halted.add(trial_id)
            continue
        if not isinstance(event, (TrialStarted, TrialFailed)):
            continue
        node = event.node or NodeRef()
        tally = tallies.get(_identity(node))
        if tally is None:
            tally = tallies[_identity(node)] = NodeTally(node)
        elif _detail(node) > _detail(tally.node):
            tally.node = node  # the same node id, described more fully
        tally.trials.add(trial_id)
        if isinstance(event, TrialStarted):
            tally.attempts += 1
            tally.restore_attempts += state.status is Status.RESTORING
            continue
        error = event.error
        if isinstance(error, RestoreError):
            tally.restore_failures += 1
        elif isinstance(error, ActorError):
            if error.preempted:
                tally.preemptions += 1
            else:
                tally.actor_deaths += 1
        elif isinstance(error, AbortError):
            tally.other_failures += 1
        else:
            tally.training_failures += 1
    return sorted(tallies.values(), key=NodeTally.sort_key)


def _detail(node: NodeRef) -> int:
    return sum(getattr(node, name) is not None for name in _FIELDS)


def _identity(node: NodeRef) -> tuple[str | None, ...]:
    """Rows are per node id; a node without one is told apart by everything it has."""
    if node.node_id:
        return (node.node_id,)
    return (None, node.node_ip, node.hostname)
