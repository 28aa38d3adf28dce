"""Hypothesis strategies and small builders for the domain tests.

Event sequences are drawn state by state: most steps pick an event the current state accepts
(so folds go deep into the table), some pick any event at all (so invalid ones are exercised).
"""

from __future__ import annotations

import re

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from statemachine.domain.death import ActorDeath, DeathCause
from statemachine.domain.events import (
    EVENT_TYPES,
    CheckpointSaved,
    CheckpointsDiscarded,
    CountersAdopted,
    DeathCauseLearned,
    Event,
    ExperimentRenamed,
    FirstResult,
    NodeAvoidanceDropped,
    NodesAvoided,
    PolicySet,
    RestoreSucceeded,
    ResumeAdvanced,
    ResumeNotAdvanced,
    TrialAdded,
    TrialCompleted,
    TrialFailed,
    TrialPaused,
    TrialRecreated,
    TrialReset,
    TrialResumed,
    TrialStarted,
    TrialStopped,
)
from statemachine.domain.failures import (
    AbortError,
    ActorError,
    RestoreError,
    TrainingError,
    TrialError,
)
from statemachine.domain.machine import MACHINE
from statemachine.domain.nodes import NodeRef
from statemachine.domain.policy import CauseAction, ExhaustionAction, RestorePhase, RetryPolicy
from statemachine.domain.status import Status

#: Folding is fast, but the first examples pay for imports and caches: no per-example deadline.
PROPERTY = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])

FATAL_NAMES = ("KeyError", "builtins.ZeroDivisionError")
CAUSE_TYPES = ("builtins.ValueError", "builtins.KeyError", "builtins.ZeroDivisionError",
               "ray.exceptions.RayActorError", "my.pkg.Oops")

_SURROGATE_PAIR = re.compile("[\ud800-\udbff][\udc00-\udfff]")
#: Any character, lone surrogates included (``os.fsdecode`` of a non-UTF-8 file name gives
#: them), with control characters, markup and surrogates drawn often.
hostile_chars = st.characters(exclude_categories=()) | st.sampled_from(
    ["\udcff", "\udc80", "\ud800", "\x1b", "\x00", "\x07", "\x9b", "[", "]", "$", "\\"]
)


def hostile_text(max_size: int = 20, min_size: int = 0) -> st.SearchStrategy[str]:
    """Arbitrary text for payloads: surrogates, controls, markup, any Unicode.

    A high surrogate directly followed by a low one is left out: no decoder produces that
    pair as two lone surrogates, and JSON cannot keep it apart (it reads back as the one
    character the pair encodes; see docs/reliability.md).
    """
    # Lists joined, not st.text: st.text leaves lone surrogates out of any alphabet it is
    # given (hypothesis 6.170 drew none in 300 examples), which this strategy exists for.
    return (
        st.lists(hostile_chars, min_size=min_size, max_size=max_size)
        .map("".join)
        .filter(lambda value: _SURROGATE_PAIR.search(value) is None)
    )


text = hostile_text()
names = st.text(alphabet="abcdefghij0123456789_/.-", min_size=1, max_size=12)


#: Causes the rules of a policy name often (and the rest of the closed set sometimes).
COMMON_CAUSES = (DeathCause.PREEMPTED, DeathCause.NODE_DIED, DeathCause.OOM,
                 DeathCause.UNKNOWN)
causes = st.sampled_from(COMMON_CAUSES) | st.sampled_from(list(DeathCause))
deaths = st.builds(ActorDeath, cause=causes,
                   ray_reason=st.sampled_from(["", "NODE_DIED/UNEXPECTED_TERMINATION",
                                               "oom_context"]) | text,
                   node_message=st.sampled_from(["", "health check failed"]) | text)
#: A message drawn from a few (so that the same failure repeats) or any text.
messages = st.sampled_from(["boom", "nan loss"]) | text


@st.composite
def failures(draw: st.DrawFn) -> TrialError:
    """Any typed failure, with causes some policies list as fatal."""
    kind = draw(st.sampled_from([RestoreError, TrainingError, ActorError, AbortError]))
    cause = draw(st.sampled_from(CAUSE_TYPES))
    message, traceback = draw(messages), draw(text)
    if kind is ActorError:
        if draw(st.booleans()):  # as a log of version 2 has it: preempted, nothing more
            return ActorError(cause, message, traceback, preempted=draw(st.booleans()))
        return ActorError(cause, message, traceback, death=draw(deaths))
    return kind(cause, message, traceback)


#: A few node ids (so folds exclude the same node twice) and sometimes nothing known.
node_ids = st.sampled_from(["a" * 56, "b" * 56, "c" * 56])
nodes = st.none() | st.builds(
    NodeRef,
    node_id=st.none() | node_ids,
    node_ip=st.none() | st.sampled_from(["10.0.0.7", "10.0.0.8"]),
    hostname=st.none() | text,
)



@st.composite
def cause_rules(
    draw: st.DrawFn, count_preemption_as_failure: bool
) -> tuple[dict[str, CauseAction], dict[str, int]]:
    """``on_cause`` and ``cause_budgets`` a policy accepts (a budget for a cause retried
    uncounted; ``preempted`` uncounted only when preemptions are not counted already)."""
    on_cause = draw(st.dictionaries(causes.map(str), st.sampled_from(list(CauseAction)),
                                    max_size=4))
    if count_preemption_as_failure and on_cause.get("preempted") is (
            CauseAction.RETRY_NOT_COUNTED):
        del on_cause["preempted"]
    uncounted = sorted(c for c, a in on_cause.items()
                       if a is CauseAction.RETRY_NOT_COUNTED and c != "preempted")
    budgets = draw(st.dictionaries(st.sampled_from(uncounted), st.integers(0, 2))
                   if uncounted else st.just({}))
    return on_cause, budgets


@st.composite
def _policy(draw: st.DrawFn) -> RetryPolicy:
    """Any valid policy (the per-cause rules and repeats drawn often enough to fire)."""
    count_preemption = draw(st.booleans())
    on_cause, budgets = draw(cause_rules(count_preemption)) if draw(st.booleans()) else ({}, {})
    return RetryPolicy(
        max_failures=draw(st.integers(-1, 4)),
        restore_retry_num=draw(st.integers(0, 3)),
        count_preemption_as_failure=count_preemption,
        max_preemptions=draw(st.none() | st.integers(0, 3)),
        on_restore_exhausted=draw(st.sampled_from(list(ExhaustionAction))),
        delete_discarded_checkpoints=draw(st.booleans()),
        fatal_exception_types=draw(
            st.lists(st.sampled_from(FATAL_NAMES), unique=True).map(tuple)),
        avoid_failed_nodes=draw(st.booleans()),
        avoid_nodes_wait_s=draw(st.integers(0, 120)),
        restore_phase=draw(st.sampled_from(list(RestorePhase))),
        on_cause=on_cause,
        cause_budgets=budgets,
        give_up_on_repeats=draw(st.none() | st.integers(2, 3)),
    )


policies = _policy()

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | text
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(text, children, max_size=3),
    max_leaves=8,
)

#: One strategy per registered event type; ``test_every_type_has_a_strategy`` checks coverage.
EVENT_STRATEGIES: dict[type[Event], st.SearchStrategy[Event]] = {
    TrialAdded: st.builds(TrialAdded, config=st.dictionaries(text, json_values, max_size=4)),
    TrialStarted: st.builds(TrialStarted, restore_from=st.none() | names, node=nodes),
    RestoreSucceeded: st.just(RestoreSucceeded()),
    CheckpointSaved: st.builds(CheckpointSaved, checkpoint=names),
    TrialPaused: st.just(TrialPaused()),
    TrialResumed: st.just(TrialResumed()),
    TrialCompleted: st.just(TrialCompleted()),
    TrialStopped: st.builds(TrialStopped, reason=text),
    TrialFailed: st.builds(TrialFailed, error=failures(), node=nodes,
                           iteration=st.none() | st.integers(0, 2)),
    CheckpointsDiscarded: st.builds(
        CheckpointsDiscarded,
        checkpoints=st.lists(names, max_size=3).map(tuple),
        deleted=st.booleans(),
        reason=text,
    ),
    PolicySet: st.builds(PolicySet, policy=policies),
    TrialReset: st.builds(TrialReset, from_scratch=st.booleans()),
    NodesAvoided: st.builds(NodesAvoided, nodes=st.lists(node_ids, max_size=2).map(tuple)),
    NodeAvoidanceDropped: st.builds(
        NodeAvoidanceDropped,
        nodes=st.lists(node_ids, max_size=2).map(tuple),
        reason=st.sampled_from(["no_other_node", "timeout", "unsupported"]),
        waited_ms=st.none() | st.integers(0, 10**6),
    ),
    CountersAdopted: st.builds(
        CountersAdopted, failures=st.integers(0, 5), preemptions=st.integers(0, 3), source=text,
    ),
    ExperimentRenamed: st.builds(
        ExperimentRenamed, old_name=names, new_name=names,
        old_storage_path=st.none() | names, new_storage_path=st.none() | names,
    ),
    TrialRecreated: st.builds(
        TrialRecreated, config=st.dictionaries(text, json_values, max_size=2), reason=text,
    ),
    FirstResult: st.builds(FirstResult, iteration=st.none() | st.integers(0, 10**6)),
    DeathCauseLearned: st.builds(DeathCauseLearned, failure_seq=st.integers(0, 30),
                                 death=deaths, source=st.sampled_from(["state_api", ""]) | text),
    ResumeAdvanced: st.builds(
        ResumeAdvanced, from_checkpoint=st.none() | text, to_checkpoint=st.none() | text,
        iterations_saved=st.none() | st.integers(0, 10**6),
        finished=st.sampled_from([None, "TERMINATED", "ERROR"])),
    ResumeNotAdvanced: st.builds(ResumeNotAdvanced, checkpoint=st.none() | text, reason=text),
}

any_event: st.SearchStrategy[Event] = st.one_of(*EVENT_STRATEGIES.values())

_BY_TRIGGER = {cls.trigger: cls for cls in EVENT_TYPES.values()}


def accepted_event_types(status: Status) -> list[type[Event]]:
    """Event types with at least one transition out of ``status`` in the shared machine."""
    return [
        _BY_TRIGGER[name]
        for name, event in MACHINE.events.items()
        if status.name in event.transitions
    ]


def event_step(data: st.DataObject, status: Status) -> Event:
    """Draw one event: usually one ``status`` accepts, sometimes any event at all."""
    accepted = accepted_event_types(status)
    if accepted and data.draw(st.integers(0, 9), label="valid?") < 8:
        cls = data.draw(st.sampled_from(accepted), label="event type")
        return data.draw(EVENT_STRATEGIES[cls], label=cls.type_name)
    return data.draw(any_event, label="any event")


# ---------------------------------------------------------------- builders for unit tests


def training_error(cause: str = "builtins.ValueError") -> TrialFailed:
    """The user's code raised while running."""
    return TrialFailed(TrainingError(cause, "boom"))


def restore_error(cause: str = "builtins.OSError") -> TrialFailed:
    """Restoring from a checkpoint failed."""
    return TrialFailed(RestoreError(cause, "restore failed"))


def actor_error(preempted: bool = False) -> TrialFailed:
    """The actor died, preempted or not."""
    return TrialFailed(
        ActorError("ray.exceptions.ActorDiedError", "actor died", preempted=preempted)
    )


def actor_death(cause: DeathCause | str, message: str = "actor died",
                iteration: int | None = None) -> TrialFailed:
    """The actor died of ``cause``."""
    return TrialFailed(
        ActorError("ray.exceptions.ActorDiedError", message, death=ActorDeath(cause)),
        iteration=iteration,
    )


def abort_error() -> TrialFailed:
    """A failure that must not be retried."""
    return TrialFailed(AbortError("ray.tune.error._AbortTrialExecution", "invalid trainable"))
