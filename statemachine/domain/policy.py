"""The retry policy: how many failures, restore retries and preemptions a trial may take.

Per cause of an actor's death (``on_cause``, in the spirit of Kubernetes' ``podFailurePolicy``)
a failure is counted (Ray's way), retried without counting it (within the cause's own budget,
``cause_budgets``) or not retried at all; ``max_preemptions`` and
``count_preemption_as_failure`` are the ``preempted`` cause's entry of the same model. The
defaults are Ray Tune's. :meth:`RetryPolicy.from_env` reads the same environment variables
Ray does (``TUNE_RESTORE_RETRY_NUM``, ``RAY_TRAIN_COUNT_PREEMPTION_AS_FAILURE``); the policy in
force is recorded in the event log, so a replay never depends on the environment it runs in.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any, TypeVar

from statemachine.domain.death import DeathCause, death_cause
from statemachine.exceptions import PolicyError

RESTORE_RETRY_ENV = "TUNE_RESTORE_RETRY_NUM"
COUNT_PREEMPTION_ENV = "RAY_TRAIN_COUNT_PREEMPTION_AS_FAILURE"


class ExhaustionAction(str, Enum):
    """What to do when a trial's restore retries are spent and it may still recover."""

    RETRY_CHECKPOINT = "retry_checkpoint"
    """Keep restoring from the same checkpoint, each failure counted (Ray 2.x)."""
    RESTART_FROM_SCRATCH = "restart_from_scratch"
    """Discard the trial's checkpoints and start training anew."""
    PREVIOUS_CHECKPOINT = "previous_checkpoint"
    """Fall back to the next older checkpoint; from scratch when none is left."""

    def __str__(self) -> str:
        return self.value


class RestorePhase(str, Enum):
    """Which failures of a trial that starts from a checkpoint count as restore failures."""

    RAY = "ray"
    """Ray's own: only a failure while Ray restores (``Trainable.restore``), plus any failure
    the user's code raises inside :func:`statemachine.tune.restoring`."""
    UNTIL_FIRST_REPORT = "until_first_report"
    """Also every failure after the restore and before the attempt's first result (a
    function trainable loads its checkpoint itself, in that stretch)."""

    def __str__(self) -> str:
        return self.value


class CauseAction(str, Enum):
    """What a failure whose actor died of a given cause does (``RetryPolicy.on_cause``)."""

    COUNT = "count"
    """Counted against ``max_failures``, like any failure (Ray's way for every cause but
    ``preempted``)."""
    RETRY_NOT_COUNTED = "retry_not_counted"
    """Retried without counting it against ``max_failures``, within the cause's own budget
    (``cause_budgets``; for ``preempted``: ``max_preemptions``); Ray's way for ``preempted``."""
    GIVE_UP = "give_up"
    """Not retried: the trial ends in ``ERROR`` (the failure is counted, as a fatal one)."""

    def __str__(self) -> str:
        return self.value


_V = TypeVar("_V")


class FrozenMap(Mapping[str, _V]):
    """An immutable, hashable mapping (a policy is frozen and hashable; ``dict`` is neither)."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, _V] | None = None) -> None:
        self._items: dict[str, _V] = dict(sorted((items or {}).items()))

    def __getitem__(self, key: str) -> _V:
        return self._items[key]

    def get(self, key: str, default: Any = None) -> Any:
        """The value of ``key``, or ``default`` (the dict's own, not ``Mapping``'s try/except:
        a fold asks the policy's rules per cause for every actor death)."""
        return self._items.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(tuple(self._items.items()))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenMap):
            return self._items == other._items
        return isinstance(other, Mapping) and self._items == dict(other.items())

    def __repr__(self) -> str:
        return f"FrozenMap({self._items!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenMap, (self._items,))


#: No rules per cause (shared: a policy is made for every new trial's state).
_NO_RULES: FrozenMap[Any] = FrozenMap()


def _cause_key(name: str, key: object) -> DeathCause:
    try:
        return death_cause(key)
    except ValueError:
        causes = ", ".join(c.value for c in DeathCause)
        raise PolicyError(f"{name} names an unknown cause {key!r}; causes: {causes}") from None


@dataclass(frozen=True)
class RetryPolicy:
    """How a trial's failures are counted and when it gives up.

    Attributes:
        max_failures: recover while ``num_failures <= max_failures``; negative: always (Ray).
        restore_retry_num: restore failures per checkpoint that do not count as failures.
        count_preemption_as_failure: whether a preempted actor counts against ``max_failures``.
        max_preemptions: separate budget for uncounted preemptions (``None``: unlimited).
        on_restore_exhausted: what to do once the restore retries are spent.
        delete_discarded_checkpoints: delete the folders of checkpoints a restart discards.
        fatal_exception_types: exception type names (short or qualified) never retried.
        avoid_failed_nodes: place a restore retry on another node than those where the
            current restore episode already failed (off: Ray's own placement).
        avoid_nodes_wait_s: how long a retry waits for another node before the exclusion is
            dropped and it runs anywhere (at once when no other node could host it).
        restore_phase: ``"ray"`` (Ray's restore phase) or ``"until_first_report"`` (a
            failure of an attempt that started from a checkpoint, before its first result,
            is a restore failure); see :class:`RestorePhase`.
        on_cause: what a failure whose actor died of a cause does, by cause
            (``{"oom": "give_up", "node_died": "retry_not_counted"}``; see
            :class:`CauseAction` and :class:`~statemachine.domain.death.DeathCause`). A cause
            not named is counted, but ``preempted``, which follows
            ``count_preemption_as_failure``.
        cause_budgets: how many failures of a cause whose action is ``retry_not_counted`` may
            be retried (``{"node_died": 3}``; a cause not named: unlimited). The preemption
            budget is ``max_preemptions``.
        give_up_on_repeats: end a trial with ``GIVE_UP`` when it fails this many times in a
            row with the same error (kind, type and message) at the same training iteration
            (at least 2; ``None``: off).
    """

    max_failures: int = 0
    restore_retry_num: int = 0
    count_preemption_as_failure: bool = False
    max_preemptions: int | None = None
    on_restore_exhausted: ExhaustionAction = ExhaustionAction.RETRY_CHECKPOINT
    delete_discarded_checkpoints: bool = False
    fatal_exception_types: tuple[str, ...] = field(default_factory=tuple)
    avoid_failed_nodes: bool = False
    avoid_nodes_wait_s: int = 60
    restore_phase: RestorePhase = RestorePhase.RAY
    on_cause: Mapping[str, CauseAction] = field(default_factory=FrozenMap)
    cause_budgets: Mapping[str, int] = field(default_factory=FrozenMap)
    give_up_on_repeats: int | None = None

    def __post_init__(self) -> None:
        def _int(name: str, value: object, minimum: int | None) -> None:
            if isinstance(value, bool) or not isinstance(value, int):
                raise PolicyError(f"{name} must be an integer, got {value!r}")
            if minimum is not None and value < minimum:
                raise PolicyError(f"{name} must be >= {minimum}, got {value}")

        _int("max_failures", self.max_failures, None)
        _int("restore_retry_num", self.restore_retry_num, 0)
        if self.max_preemptions is not None:
            _int("max_preemptions", self.max_preemptions, 0)
        _int("avoid_nodes_wait_s", self.avoid_nodes_wait_s, 0)
        for name in ("count_preemption_as_failure", "delete_discarded_checkpoints",
                     "avoid_failed_nodes"):
            if not isinstance(getattr(self, name), bool):
                raise PolicyError(f"{name} must be true or false, got {getattr(self, name)!r}")
        try:
            action = ExhaustionAction(self.on_restore_exhausted)
        except ValueError:
            choices = ", ".join(a.value for a in ExhaustionAction)
            raise PolicyError(
                f"on_restore_exhausted must be one of {choices}, got {self.on_restore_exhausted!r}"
            ) from None
        object.__setattr__(self, "on_restore_exhausted", action)
        try:
            phase = RestorePhase(self.restore_phase)
        except ValueError:
            choices = ", ".join(p.value for p in RestorePhase)
            raise PolicyError(
                f"restore_phase must be one of {choices}, got {self.restore_phase!r}"
            ) from None
        object.__setattr__(self, "restore_phase", phase)
        fatal = self.fatal_exception_types
        if isinstance(fatal, str) or not all(isinstance(n, str) and n for n in fatal):
            raise PolicyError(
                f"fatal_exception_types must be a list of exception type names, got {fatal!r}"
            )
        object.__setattr__(self, "fatal_exception_types", tuple(fatal))
        if self.give_up_on_repeats is not None:
            _int("give_up_on_repeats", self.give_up_on_repeats, 2)
        self._check_causes()

    def _check_causes(self) -> None:
        """Validate ``on_cause`` and ``cause_budgets`` and freeze them (keys: cause values)."""
        if self.on_cause == _NO_RULES and self.cause_budgets == _NO_RULES:
            object.__setattr__(self, "on_cause", _NO_RULES)  # the common case, shared
            object.__setattr__(self, "cause_budgets", _NO_RULES)
            return
        if not isinstance(self.on_cause, Mapping):
            raise PolicyError(f"on_cause must map causes to actions, got {self.on_cause!r}")
        actions: dict[str, CauseAction] = {}
        for key, value in self.on_cause.items():
            cause = _cause_key("on_cause", key)
            try:
                actions[cause.value] = CauseAction(value)
            except ValueError:
                choices = ", ".join(a.value for a in CauseAction)
                raise PolicyError(f"on_cause[{cause.value!r}] must be one of {choices}, got "
                                  f"{value!r}") from None
        preempted = actions.get(DeathCause.PREEMPTED.value)
        if preempted is CauseAction.RETRY_NOT_COUNTED and self.count_preemption_as_failure:
            raise PolicyError("on_cause['preempted'] = retry_not_counted contradicts "
                              "count_preemption_as_failure=True: set one of them")
        object.__setattr__(self, "on_cause", FrozenMap(actions))
        if not isinstance(self.cause_budgets, Mapping):
            raise PolicyError(f"cause_budgets must map causes to counts, got "
                              f"{self.cause_budgets!r}")
        budgets: dict[str, int] = {}
        for key, budget in self.cause_budgets.items():
            cause = _cause_key("cause_budgets", key)
            if cause is DeathCause.PREEMPTED:
                raise PolicyError("cause_budgets cannot name 'preempted': the preemption "
                                  "budget is max_preemptions")
            if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
                raise PolicyError(f"cause_budgets[{cause.value!r}] must be an integer >= 0, "
                                  f"got {budget!r}")
            if actions.get(cause.value) is not CauseAction.RETRY_NOT_COUNTED:
                raise PolicyError(f"cause_budgets[{cause.value!r}] needs "
                                  f"on_cause[{cause.value!r}] = retry_not_counted (a budget "
                                  "of retries not counted as failures)")
            budgets[cause.value] = budget
        object.__setattr__(self, "cause_budgets", FrozenMap(budgets))

    def cause_action(self, cause: DeathCause) -> CauseAction:
        """What a failure whose actor died of ``cause`` does under this policy."""
        action = self.on_cause.get(cause.value) if self.on_cause else None
        if action is not None:
            return action
        if cause is DeathCause.PREEMPTED and not self.count_preemption_as_failure:
            return CauseAction.RETRY_NOT_COUNTED
        return CauseAction.COUNT

    def cause_budget(self, cause: DeathCause) -> int | None:
        """How many failures of ``cause`` may be retried uncounted (``None``: unlimited)."""
        if cause is DeathCause.PREEMPTED:
            return self.max_preemptions
        return self.cause_budgets.get(cause.value)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> RetryPolicy:
        """Ray's defaults, read from the environment as Ray reads them, then ``overrides``."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        raw = env.get(RESTORE_RETRY_ENV)
        if raw not in (None, ""):
            try:
                retries = int(raw)
            except ValueError:
                retries = -1
            if retries < 0:
                raise PolicyError(
                    f"{RESTORE_RETRY_ENV} must be an integer >= 0 (restore_retry_num), "
                    f"got {raw!r}"
                )
            values["restore_retry_num"] = retries
        raw = env.get(COUNT_PREEMPTION_ENV)
        if raw not in (None, ""):
            try:
                values["count_preemption_as_failure"] = bool(int(raw))
            except ValueError:
                raise PolicyError(
                    f"{COUNT_PREEMPTION_ENV} must be 0 or 1 (count_preemption_as_failure), "
                    f"got {raw!r}"
                ) from None
        values.update(overrides)
        return cls(**values)

    def within_max_failures(self, num_failures: int) -> bool:
        """Ray's ``should_recover``: ``num_failures <= max_failures`` or unlimited."""
        return self.max_failures < 0 or num_failures <= self.max_failures

    def is_fatal(self, cause_type: str) -> bool:
        """Whether a cause of this qualified type name is listed as fatal."""
        short = cause_type.rsplit(".", 1)[-1]
        return cause_type in self.fatal_exception_types or short in self.fatal_exception_types

    def replace(self, **changes: Any) -> RetryPolicy:
        """A copy with some fields changed (validated like a new policy)."""
        return type(self)(**{**self.to_dict(), **changes})

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of this policy."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Enum):
                value = value.value
            elif isinstance(value, tuple):
                value = list(value)
            elif isinstance(value, Mapping):
                value = {k: v.value if isinstance(v, Enum) else v for k, v in value.items()}
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RetryPolicy:
        """Rebuild a policy from :meth:`to_dict` output; unknown fields are refused."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise PolicyError(f"unknown retry policy field(s): {', '.join(unknown)}")
        values = dict(data)
        if "fatal_exception_types" in values and isinstance(
            values["fatal_exception_types"], list
        ):
            values["fatal_exception_types"] = tuple(values["fatal_exception_types"])
        return cls(**values)
