"""The folded state of one trial: status, counters, checkpoints, policy in force."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from statemachine.domain.failures import TrialError
from statemachine.domain.nodes import NodeRef
from statemachine.domain.policy import RetryPolicy
from statemachine.domain.status import Decision, Status

#: Checkpoints remembered per trial, newest last; older ones fall off (bounded snapshots).
CHECKPOINT_HISTORY = 32
#: The policy of a new trial's state (Ray's defaults), one frozen instance shared by all.
DEFAULT_POLICY = RetryPolicy()


class Counters(NamedTuple):
    """A trial's failure counters after a transition."""

    failures: int
    """Failures counted against ``max_failures`` (Ray's ``num_failures``)."""
    restore_failures: int
    """Restore failures in the current restore episode (Ray's ``num_restore_failures``)."""
    total_restore_failures: int
    """Restore failures over the trial's whole life."""
    preemptions: int
    """Preemptions not counted as failures."""


_counters = functools.partial(tuple.__new__, Counters)  # Counters(*values), in C


@dataclass(slots=True)
class TrialState:
    """The state of one trial, as folded from its events.

    The state machine mutates it in place while folding; use :meth:`copy` to keep a version.
    """

    trial_id: str
    status: Status = Status.NEW
    policy: RetryPolicy = field(default_factory=lambda: DEFAULT_POLICY)
    failures: int = 0
    restore_failures: int = 0
    total_restore_failures: int = 0
    preemptions: int = 0
    checkpoints: tuple[str, ...] = ()
    restoring_from: str | None = None
    """Checkpoint of the current restore episode (what ``restore_failures`` refers to)."""
    last_error: TrialError | None = None
    last_decision: Decision | None = None
    seq: int = 0
    """Number of events folded into this state (the per-trial sequence number)."""
    last_failure_node: NodeRef | None = None
    """Where the last failure happened (``None``: not recorded)."""
    excluded_nodes: tuple[str, ...] = ()
    """Node ids where the current restore episode failed, avoided by its next attempt
    (``RetryPolicy.avoid_failed_nodes``); empty otherwise."""
    incarnation: int = 0
    """How many times a new trial took over this id after an earlier one ended
    (``TrialRecreated``); 0 for the first trial behind the id."""
    unconfirmed_restore: str | None = None
    """Checkpoint Ray restored the current attempt from, while no result of the attempt has
    come yet: a failure of the user's restore (``restoring()``, or any failure under
    ``restore_phase="until_first_report"``) continues that restore episode."""
    unconfirmed_restore_failures: int = 0
    """The restore failures of that episode (Ray's own counter went back to 0)."""
    user_restore_failed: bool = False
    """The current restore episode holds a failure of the user's own restore: it goes on
    across a new attempt that restarts before its first result (a driver restart)."""
    cause_retries: tuple[tuple[str, int], ...] = ()
    """Failures retried without counting them, per cause of an actor's death (``on_cause``
    ``retry_not_counted``; preemptions are ``preemptions``), as sorted ``(cause, n)`` pairs."""
    repeats: int = 0
    """How many failures in a row were the last one's (same kind, type and message at the
    same training iteration), the last included; 0 before any failure, and for a failure
    whose iteration was not recorded (it never repeats another)."""
    last_failure_iteration: int | None = None
    """The training iteration the last failure happened at (``None``: not recorded)."""

    @property
    def counters(self) -> Counters:
        """The four failure counters."""
        return _counters(
            (self.failures, self.restore_failures, self.total_restore_failures, self.preemptions)
        )

    def cause_retry_count(self, cause: str) -> int:
        """Failures of ``cause`` retried without counting them (``cause_retries``)."""
        for name, count in self.cause_retries:
            if name == cause:
                return count
        return 0

    @property
    def latest_checkpoint(self) -> str | None:
        """The newest known checkpoint, or ``None``."""
        return self.checkpoints[-1] if self.checkpoints else None

    def copy(self) -> TrialState:
        """An independent copy (all fields are immutable values)."""
        return TrialState(
            self.trial_id,
            self.status,
            self.policy,
            self.failures,
            self.restore_failures,
            self.total_restore_failures,
            self.preemptions,
            self.checkpoints,
            self.restoring_from,
            self.last_error,
            self.last_decision,
            self.seq,
            self.last_failure_node,
            self.excluded_nodes,
            self.incarnation,
            self.unconfirmed_restore,
            self.unconfirmed_restore_failures,
            self.user_restore_failed,
            self.cause_retries,
            self.repeats,
            self.last_failure_iteration,
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of this state (what a snapshot stores)."""
        return {
            "trial_id": self.trial_id,
            "status": self.status.value,
            "policy": self.policy.to_dict(),
            "failures": self.failures,
            "restore_failures": self.restore_failures,
            "total_restore_failures": self.total_restore_failures,
            "preemptions": self.preemptions,
            "checkpoints": list(self.checkpoints),
            "restoring_from": self.restoring_from,
            "last_error": self.last_error.to_dict() if self.last_error else None,
            "last_decision": self.last_decision.value if self.last_decision else None,
            "seq": self.seq,
            "last_failure_node": (
                self.last_failure_node.to_dict() if self.last_failure_node else None
            ),
            "excluded_nodes": list(self.excluded_nodes),
            "incarnation": self.incarnation,
            "unconfirmed_restore": self.unconfirmed_restore,
            "unconfirmed_restore_failures": self.unconfirmed_restore_failures,
            "user_restore_failed": self.user_restore_failed,
            "cause_retries": dict(self.cause_retries),
            "repeats": self.repeats,
            "last_failure_iteration": self.last_failure_iteration,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialState:
        """Rebuild a state from :meth:`to_dict` output (an older one lacks the node fields, the
        unconfirmed restore and the failure's cause retries and repeats)."""
        # Positional, with the enums looked up by value: this runs once per trial when an
        # experiment opens (100,000 times for a large one), where keywords and ``Enum.__call__``
        # were a third of the cost. A value that is not a status or decision is a KeyError.
        node = data.get("last_failure_node")
        error = data["last_error"]
        decision = data["last_decision"]
        get = data.get
        return cls(
            data["trial_id"],
            _STATUS_BY_VALUE[data["status"]],
            _policy_from_dict(data["policy"]),
            data["failures"],
            data["restore_failures"],
            data["total_restore_failures"],
            data["preemptions"],
            tuple(data["checkpoints"]),
            data["restoring_from"],
            TrialError.from_dict(error) if error else None,
            _DECISION_BY_VALUE[decision] if decision else None,
            data["seq"],
            NodeRef.from_dict(node) if node else None,
            tuple(get("excluded_nodes", ())),
            int(get("incarnation", 0)),
            get("unconfirmed_restore"),
            get("unconfirmed_restore_failures", 0),
            get("user_restore_failed", False),
            tuple(sorted(retries.items())) if (retries := get("cause_retries")) else (),
            get("repeats", 0),
            get("last_failure_iteration"),
        )


_STATUS_BY_VALUE: dict[str, Status] = {status.value: status for status in Status}
_DECISION_BY_VALUE: dict[str, Decision] = {decision.value: decision for decision in Decision}


def _policy_from_dict(data: dict[str, Any]) -> RetryPolicy:
    """``RetryPolicy.from_dict``, shared: the trials of an experiment carry the same policy.

    Opening an experiment decodes one snapshot per trial; validating the same policy 100,000
    times was most of that cost. Policies are frozen, so one instance can serve every trial.
    A decoded policy is reused only for a dict equal to the one it came from value for value
    and type for type (``1 == True`` must not let a malformed policy through).
    """
    types = _value_types(data)
    for known, known_types, policy in _RECENT_POLICIES:
        if known == data and known_types == types:
            return policy
    policy = RetryPolicy.from_dict(data)
    _RECENT_POLICIES.insert(0, (dict(data), types, policy))
    del _RECENT_POLICIES[8:]
    return policy


def _value_types(data: dict[str, Any]) -> list[Any]:
    """The types of a policy dict's values, and of the values of its non-empty maps (the rules
    per cause: ``1 == True`` holds inside them too)."""
    types: list[Any] = list(map(type, data.values()))
    for name in ("on_cause", "cause_budgets"):
        rules = data.get(name)
        if rules and isinstance(rules, dict):
            types.append([type(value) for value in rules.values()])
    return types


#: The last few distinct policies decoded (value, value types, policy), newest first.
_RECENT_POLICIES: list[tuple[dict[str, Any], list[Any], RetryPolicy]] = []
