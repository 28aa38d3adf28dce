"""The fold: a transition table compiled from the ``transitions`` machine itself.

``transitions`` is the definition. Folding through its ``Event.trigger`` costs about 10 us per
event; this module reads the very same ``Machine`` object (its events, transitions, condition
and effect callables and rules, in the same order) into plain dicts and tuples, and folds
through them with the same callables: every fold of the package runs here (the live one is
:func:`fold_for_session`). Nothing is written twice: a transition added to
:func:`statemachine.domain.machine.transition_table` is compiled here automatically, and a
property test proves both paths give equal states and records.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any, cast

from transitions import Machine

from statemachine.domain.events import Event, TrialFailed, with_policy
from statemachine.domain.machine import (
    MACHINE,
    RuleTransition,
    TransitionRecord,
    cause_retries_of,
)
from statemachine.domain.policy import RetryPolicy
from statemachine.domain.rules import Rule
from statemachine.domain.state import TrialState
from statemachine.domain.status import Status
from statemachine.exceptions import InvalidTransitionError

_Callback = Callable[[Any], Any]
_Guard = tuple[_Callback, bool]
_Branch = tuple[tuple[_Guard, ...], tuple[Callable[[Any], Any], ...], Status | None, Rule]


class _EventData:
    """The two attributes of ``transitions.EventData`` that guards and effects read."""

    __slots__ = ("kwargs", "model")

    def __init__(self, model: TrialState, kwargs: dict[str, Any]) -> None:
        self.model = model
        self.kwargs = kwargs


def compile_machine(machine: Machine = MACHINE) -> dict[tuple[str, Status], tuple[_Branch, ...]]:
    """``{(trigger, source status): branches in guard order}`` read from ``machine``.

    A branch is ``(guards, effects, destination, rule)``: the transition's own condition and
    ``before`` callables and its :class:`~statemachine.domain.rules.Rule`.
    """
    # (finalize_event may be set: it runs after a trigger, changes nothing, and is how the
    # Machine's own apply learns the rule that fired.)
    if machine.before_state_change or machine.after_state_change or machine.prepare_event:
        raise ValueError("machine-wide callbacks are not supported by the compiled table")
    table: dict[tuple[str, Status], tuple[_Branch, ...]] = {}
    for name, event in machine.events.items():
        for source, transitions in event.transitions.items():
            branches: list[_Branch] = []
            for t in transitions:
                if t.prepare or t.after:
                    raise ValueError(f"transition {t!r}: prepare/after callbacks not supported")
                conditions = tuple((c.func, c.target) for c in t.conditions)
                if any(not callable(func) for func, _ in conditions) or any(
                    not callable(func) for func in t.before
                ):
                    raise ValueError(f"transition {t!r}: callbacks must be callables")
                dest = Status[t.dest] if t.dest is not None else None
                guards = tuple((cast(_Callback, func), target) for func, target in conditions)
                befores = tuple(cast(_Callback, func) for func in t.before)
                if not isinstance(t, RuleTransition):
                    raise ValueError(f"transition {t!r} carries no rule")
                branches.append((guards, befores, dest, t.rule))
            table[(name, Status[source])] = tuple(branches)
    return table


TABLE = compile_machine()
#: A record from its fields in order: what the named tuple's constructor does, in C, without
#: its keyword handling (one is made per recorded event).
_record = functools.partial(tuple.__new__, TransitionRecord)
_bare = object.__new__


def _fire(branches: tuple[_Branch, ...], ed: _EventData, state: TrialState) -> Rule | None:
    """Fire the first branch whose guards all hold (effects, destination, seq + 1).

    The one guard loop of both folds: the rule that fired, or ``None`` (and ``state``
    untouched) when none holds.
    """
    for conditions, effects, dest, rule in branches:
        for func, target in conditions:
            if bool(func(ed)) is not target:
                break
        else:
            for effect in effects:
                effect(ed)
            if dest is not None:
                state.status = dest
            state.seq += 1
            return rule
    return None


def apply_compiled(
    state: TrialState,
    event: Event,
    policy: RetryPolicy | None = None,
    previous: TransitionRecord | None = None,
) -> TransitionRecord:
    """Exactly :func:`statemachine.domain.machine.apply`, through the compiled table.

    ``previous``: the trial's last record, returned again (the same immutable value) when
    this event's record would equal it: a run of checkpoints or results of a running trial
    then builds one record, not one per event.
    """
    before = state.status
    branches = TABLE.get((event.trigger, before))
    ed = _bare(_EventData)  # its __init__ call would cost more than the two stores
    ed.model = state
    ed.kwargs = {"event": event, "policy": policy or state.policy}
    rule = _fire(branches, ed, state) if branches is not None else None
    if rule is not None:
        if isinstance(event, TrialFailed):
            return _record((
                state.trial_id, event.type_name, before, state.status, state.last_decision,
                state.counters, event.error, rule, cause_retries_of(state, event, rule),
            ))  # fmt: skip
        if (
            previous is not None
            and previous.rule is rule
            and previous.status_after is state.status
            and previous.decision is None
            and previous.event is event.type_name
            and previous.trial_id is state.trial_id
            and previous.counters == state.counters
        ):  # fmt: skip
            return previous
        return _record((
            state.trial_id, event.type_name, before, state.status, None, state.counters, None,
            rule, None,
        ))  # fmt: skip
    raise InvalidTransitionError(state.trial_id, before.value, event.type_name)


#: What recording one event wrote: ``(event, the trial's seq before it, its record, the state
#: after it)``; the state is ``None`` for the last event (it is the ``work`` state folded).
Recorded = tuple[Event, int, TransitionRecord, TrialState | None]


def fold_for_session(
    work: TrialState,
    event: Event,
    session: RetryPolicy,
    previous: TransitionRecord | None = None,
) -> list[Recorded]:
    """Fold ``event`` into ``work`` (in place) as a driver session with policy ``session``
    records it: a ``PolicySet`` of the session's policy first when it is not the trial's
    policy in force (:func:`~statemachine.domain.events.with_policy`, the rule that keeps a
    trial's stream self-contained), then the event; the state after the ``PolicySet`` is a
    copy.

    The live fold of both the Tune recorder and the :class:`~statemachine.log.ExperimentLog`.
    An invalid event raises :class:`InvalidTransitionError` (fold on a copy: a ``PolicySet``
    before it may have changed ``work``). ``previous``: as for :func:`apply_compiled`.
    """
    if work.policy is session:  # the common case: with_policy says [event]
        seq = work.seq
        return [(event, seq, apply_compiled(work, event, None, previous), None)]
    recorded: list[Recorded] = []
    for each in with_policy(event, work.policy, session):
        if recorded:  # the state after the previous one, kept apart
            recorded[-1] = (*recorded[-1][:3], work.copy())
        seq = work.seq
        recorded.append((each, seq, apply_compiled(work, each), None))
    return recorded


def step_compiled(state: TrialState, event: Event, policy: RetryPolicy) -> None:
    """Fold one event into ``state`` (in place) under ``policy``, building no record: the
    step of :func:`fold_compiled`, for a caller that decides the next event from the state
    (a simulation). An invalid event raises :class:`InvalidTransitionError`, ``state``
    untouched."""
    branches = TABLE.get((event.trigger, state.status))
    ed = _bare(_EventData)
    ed.model = state
    ed.kwargs = {"event": event, "policy": policy}
    if branches is None or _fire(branches, ed, state) is None:
        raise InvalidTransitionError(state.trial_id, state.status.value, event.type_name)


def fold_compiled(
    trial_id: str,
    events: Iterable[Event],
    policy: RetryPolicy | None = None,
    state: TrialState | None = None,
) -> TrialState:
    """Fold ``events`` through the compiled table; returns the final state only.

    The bulk-replay path: the same branches and callables as :func:`apply_compiled`, without
    building a :class:`TransitionRecord` per event. An invalid event raises
    :class:`InvalidTransitionError`; ``state`` (if given) is never modified, as with
    :func:`statemachine.domain.machine.fold`.
    """
    current = state.copy() if state is not None else TrialState(trial_id)
    table = TABLE
    fire = _fire
    ed = _EventData(current, {})
    for event in events:
        branches = table.get((event.trigger, current.status))
        # The policy is looked up per event: a PolicySet changes it mid-fold.
        ed.kwargs = {"event": event, "policy": policy or current.policy}
        if branches is None or fire(branches, ed, current) is None:
            raise InvalidTransitionError(current.trial_id, current.status.value, event.type_name)
    return current
