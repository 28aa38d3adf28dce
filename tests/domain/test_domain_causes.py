"""Why an actor died, and the rules per cause: the default is Ray's, each rule does what it
says, budgets hold, repeats end a trial, a cause learned late changes nothing decided.

The property tests fold random histories (the domain strategies, with rules per cause drawn
often) through the Machine and check every failure against an oracle written here from the
rule's words, never from the machine's guards.
"""

from __future__ import annotations

import json
import pickle
from dataclasses import replace
from typing import Any

import pytest
from domain_strategies import (
    EVENT_STRATEGIES,
    PROPERTY,
    actor_death,
    deaths,
    event_step,
    messages,
    policies,
    training_error,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine.domain.death import ActorDeath, DeathCause
from statemachine.domain.events import (
    CheckpointSaved,
    DeathCauseLearned,
    Event,
    PolicySet,
    RestoreSucceeded,
    TrialAdded,
    TrialFailed,
    TrialRecreated,
    TrialReset,
    TrialStarted,
    decode_event,
    encode_event,
)
from statemachine.domain.failures import ActorError, TrainingError, TrialError
from statemachine.domain.machine import TransitionRecord, apply
from statemachine.domain.policy import CauseAction, FrozenMap, RetryPolicy
from statemachine.domain.rules import RuleName
from statemachine.domain.state import TrialState
from statemachine.domain.status import Decision, Status
from statemachine.exceptions import EventDecodeError, InvalidTransitionError, PolicyError

ACTIVE = (Status.PENDING, Status.RUNNING, Status.PAUSED)


# ---------------------------------------------------------------- the failure and its events


def test_an_actor_failure_carries_its_death() -> None:
    death = ActorDeath(DeathCause.NODE_DIED, "NODE_DIED/UNEXPECTED_TERMINATION",
                       "health check failed")
    error = ActorError("ray.exceptions.ActorDiedError", "died", death=death)
    assert (error.cause, error.preempted, error.death) == (DeathCause.NODE_DIED, False, death)
    assert error.to_dict() == {
        "kind": "ActorError", "cause_type": "ray.exceptions.ActorDiedError",
        "message": "died", "traceback": "", "preempted": False, "cause": "node_died",
        "ray_reason": "NODE_DIED/UNEXPECTED_TERMINATION", "node_message": "health check failed",
    }
    assert TrialError.from_dict(json.loads(json.dumps(error.to_dict()))) == error
    assert pickle.loads(pickle.dumps(error)) == error
    assert death.describe() == "node died (unexpected termination: health check failed)"


def test_preempted_is_the_preempted_cause() -> None:
    assert ActorError("t", "m", preempted=True).cause is DeathCause.PREEMPTED
    assert ActorError("t", "m").cause is DeathCause.UNKNOWN
    assert ActorError("t", "m", death=ActorDeath("preempted")).preempted
    with pytest.raises(ValueError, match="contradicts"):
        ActorError("t", "m", preempted=True, death=ActorDeath(DeathCause.OOM))


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize(("preempted", "cause"), [(True, "preempted"), (False, "unknown")])
def test_an_older_actor_failure_reads_as_preempted_or_unknown(
    version: int, preempted: bool, cause: str
) -> None:
    payload = {"error": {"kind": "ActorError", "cause_type": "ray.exceptions.RayActorError",
                         "message": "died", "traceback": "", "preempted": preempted}}
    event = decode_event("TrialFailed", version, payload)
    assert isinstance(event, TrialFailed) and isinstance(event.error, ActorError)
    assert event.error.cause.value == cause and event.error.preempted is preempted
    assert event.error.death.ray_reason == "" and event.iteration is None


def test_version_3_round_trips_the_death_and_the_iteration() -> None:
    event = actor_death(DeathCause.OOM, iteration=57)
    name, version, payload = encode_event(event)
    assert (name, version) == ("TrialFailed", 3)
    assert payload["iteration"] == 57 and payload["error"]["cause"] == "oom"
    assert decode_event(name, version, json.loads(json.dumps(payload))) == event


BAD: list[tuple[str, int, dict[str, Any], str]] = [
    ("TrialFailed", 2, {"error": TrainingError("a", "m").to_dict(), "iteration": 3},
     "later version: iteration"),
    ("TrialFailed", 3, {"error": TrainingError("a", "m").to_dict(), "iteration": "3"},
     "'iteration'"),
    ("TrialFailed", 3, {"error": {**ActorError("a", "m").to_dict(), "cause": "gremlins"}},
     "gremlins"),
    ("TrialFailed", 3, {"error": {**ActorError("a", "m").to_dict(), "preempted": True,
                                  "cause": "oom"}}, "contradicts"),
    ("TrialFailed", 3, {"error": {**ActorError("a", "m").to_dict(), "node_message": 5}},
     "node_message"),
    ("DeathCauseLearned", 1, {"death": {"cause": "oom"}}, "failure_seq"),
    ("DeathCauseLearned", 1, {"failure_seq": 3}, "death"),
    ("DeathCauseLearned", 1, {"failure_seq": 3, "death": {"cause": "bad"}}, "bad"),
    ("DeathCauseLearned", 1, {"failure_seq": 3, "death": {"cause": "oom", "x": 1}}, "x"),
    ("PolicySet", 4, {"policy": {"on_cause": {"oom": "explode"}}}, "on_cause"),
    ("PolicySet", 4, {"policy": {"give_up_on_repeats": 1}}, "give_up_on_repeats"),
]


@pytest.mark.parametrize(("type_name", "version", "payload", "words"), BAD,
                         ids=[f"{b[0]}-{b[3]}" for b in BAD])
def test_a_malformed_cause_is_a_clear_decode_error(
    type_name: str, version: int, payload: dict[str, Any], words: str
) -> None:
    with pytest.raises(EventDecodeError) as info:
        decode_event(type_name, version, payload)
    assert words in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_older_policies_decode_without_rules_per_cause(version: int) -> None:
    event = decode_event("PolicySet", version, {"policy": {"max_failures": 2}})
    assert isinstance(event, PolicySet)
    assert event.policy == RetryPolicy(max_failures=2)
    assert (event.policy.on_cause, event.policy.cause_budgets) == ({}, {})
    assert event.policy.give_up_on_repeats is None


def test_a_policy_with_rules_per_cause_round_trips() -> None:
    p = RetryPolicy(on_cause={"oom": "give_up", "node_died": "retry_not_counted"},
                    cause_budgets={"node_died": 3}, give_up_on_repeats=2)
    name, version, payload = encode_event(PolicySet(p))
    assert version == 4 and payload["policy"]["on_cause"] == {"node_died": "retry_not_counted",
                                                              "oom": "give_up"}
    assert decode_event(name, version, json.loads(json.dumps(payload))) == PolicySet(p)
    assert pickle.loads(pickle.dumps(p)) == p and hash(pickle.loads(pickle.dumps(p))) == hash(p)
    assert p.on_cause["oom"] is CauseAction.GIVE_UP
    with pytest.raises(TypeError):
        p.on_cause["oom"] = CauseAction.COUNT  # type: ignore[index]


@pytest.mark.parametrize(("changes", "words"), [
    ({"on_cause": {"gremlins": "give_up"}}, "on_cause names an unknown cause 'gremlins'"),
    ({"on_cause": {"oom": "pray"}}, "on_cause['oom'] must be one of"),
    ({"on_cause": ["oom"]}, "on_cause must map"),
    ({"cause_budgets": {"oom": 2}}, "needs on_cause['oom'] = retry_not_counted"),
    ({"on_cause": {"oom": "retry_not_counted"}, "cause_budgets": {"oom": -1}}, ">= 0"),
    ({"on_cause": {"oom": "retry_not_counted"}, "cause_budgets": {"oom": True}}, ">= 0"),
    ({"cause_budgets": {"preempted": 1}}, "max_preemptions"),
    ({"count_preemption_as_failure": True, "on_cause": {"preempted": "retry_not_counted"}},
     "contradicts count_preemption_as_failure"),
    ({"give_up_on_repeats": 1}, "give_up_on_repeats must be >= 2"),
    ({"give_up_on_repeats": True}, "give_up_on_repeats must be an integer"),
])
def test_bad_rules_per_cause_are_refused_in_one_line(changes: dict[str, Any],
                                                      words: str) -> None:
    with pytest.raises(PolicyError) as info:
        RetryPolicy(**changes)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_preempted_is_the_same_model() -> None:
    # max_preemptions and count_preemption_as_failure are preempted's entry of on_cause
    p = RetryPolicy(max_preemptions=2)
    assert p.cause_action(DeathCause.PREEMPTED) is CauseAction.RETRY_NOT_COUNTED
    assert p.cause_budget(DeathCause.PREEMPTED) == 2
    counted = RetryPolicy(count_preemption_as_failure=True)
    assert counted.cause_action(DeathCause.PREEMPTED) is CauseAction.COUNT
    assert RetryPolicy().cause_action(DeathCause.NODE_DIED) is CauseAction.COUNT
    assert RetryPolicy(on_cause={"preempted": "give_up"}).cause_action(
        DeathCause.PREEMPTED) is CauseAction.GIVE_UP


def test_frozen_maps_compare_and_hash_like_their_items() -> None:
    a, b = FrozenMap({"x": 1, "y": 2}), FrozenMap({"y": 2, "x": 1})
    assert a == b == {"x": 1, "y": 2} and hash(a) == hash(b) and a != FrozenMap({"x": 1})
    assert pickle.loads(pickle.dumps(a)) == a and list(a) == ["x", "y"]


# ---------------------------------------------------------------- rules, by hand


def _fold(policy: RetryPolicy, events: list[Event]) -> list[TransitionRecord]:
    state = TrialState("t", policy=policy)
    return [apply(state, e) for e in events]


def _attempts(failure: TrialFailed, times: int) -> list[Event]:
    return [TrialAdded()] + [e for _ in range(times) for e in (TrialStarted(), failure)]


def test_node_died_retried_uncounted_within_its_budget() -> None:
    # "node_died": retry_not_counted, at most 2: the third gives up; none is counted
    policy = RetryPolicy(max_failures=5, on_cause={"node_died": "retry_not_counted"},
                         cause_budgets={"node_died": 2})
    failures = [r for r in _fold(policy, _attempts(actor_death("node_died"), 3)) if r.error]
    assert [r.decision for r in failures] == [Decision.RECOVER_NOT_COUNTED] * 2 + [
        Decision.GIVE_UP]
    assert [r.rule.name for r in failures if r.rule] == [RuleName.CAUSE_RECOVER] * 2 + [
        RuleName.CAUSE_GIVE_UP]
    assert [r.counters.failures for r in failures] == [0, 0, 0]
    assert [r.numbers().cause_retry for r in failures] == [1, 2, 3]


def test_oom_given_up_at_once_and_counted() -> None:
    policy = RetryPolicy(max_failures=5, on_cause={"oom": "give_up"})
    (record,) = [r for r in _fold(policy, _attempts(actor_death("oom"), 1)) if r.error]
    assert (record.decision, record.status_after, record.counters.failures) == (
        Decision.GIVE_UP, Status.ERROR, 1)
    assert record.rule is not None and record.rule.name == RuleName.CAUSE_FATAL
    # another cause is counted, as Ray counts it
    (other,) = [r for r in _fold(policy, _attempts(actor_death("node_died"), 1)) if r.error]
    assert (other.decision, other.counters.failures) == (Decision.RECOVER, 1)


def test_the_same_failure_at_the_same_iteration_gives_up_after_n() -> None:
    policy = RetryPolicy(max_failures=10, give_up_on_repeats=3)
    nan = TrialFailed(TrainingError("builtins.ValueError", "nan"), iteration=57)
    failures = [r for r in _fold(policy, _attempts(nan, 3)) if r.error]
    assert [r.decision for r in failures] == [Decision.RECOVER, Decision.RECOVER,
                                              Decision.GIVE_UP]
    assert failures[-1].rule is not None and failures[-1].rule.name == RuleName.REPEATED
    assert failures[-1].counters.failures == 3


@pytest.mark.parametrize("other", [
    TrialFailed(TrainingError("builtins.ValueError", "nan"), iteration=58),  # progress
    TrialFailed(TrainingError("builtins.ValueError", "inf"), iteration=57),  # another message
    TrialFailed(TrainingError("builtins.KeyError", "nan"), iteration=57),  # another type
    TrialFailed(TrainingError("builtins.ValueError", "nan")),  # iteration not recorded
])
def test_another_failure_in_between_starts_the_count_again(other: TrialFailed) -> None:
    policy = RetryPolicy(max_failures=10, give_up_on_repeats=2)
    nan = TrialFailed(TrainingError("builtins.ValueError", "nan"), iteration=57)
    events = [TrialAdded(), TrialStarted(), nan, TrialStarted(), other, TrialStarted(), nan]
    assert [r.decision for r in _fold(policy, events) if r.error] == [Decision.RECOVER] * 3


def test_repeats_are_off_by_default_and_without_an_iteration() -> None:
    nan = TrialFailed(TrainingError("builtins.ValueError", "nan"), iteration=57)
    assert Decision.GIVE_UP not in [r.decision for r in _fold(
        RetryPolicy(max_failures=10), _attempts(nan, 5))]
    unknown = TrialFailed(TrainingError("builtins.ValueError", "nan"))
    assert Decision.GIVE_UP not in [r.decision for r in _fold(
        RetryPolicy(max_failures=10, give_up_on_repeats=2), _attempts(unknown, 5))]


def test_restart_from_scratch_starts_the_count_again_resume_does_not() -> None:
    policy = RetryPolicy(max_failures=0, give_up_on_repeats=2)
    nan = TrialFailed(TrainingError("builtins.ValueError", "nan"), iteration=5)
    ended = [TrialAdded(), TrialStarted(), nan]  # max_failures 0: ERROR at once
    resumed = _fold(policy, [*ended, TrialReset(), TrialStarted(), nan])[-1]
    assert resumed.rule is not None and resumed.rule.name == RuleName.REPEATED
    fresh = _fold(policy, [*ended, TrialReset(from_scratch=True), TrialStarted(), nan])[-1]
    assert fresh.rule is not None and fresh.rule.name == RuleName.GIVE_UP


def test_a_cause_learned_late_is_worded_but_changes_nothing() -> None:
    policy = RetryPolicy(max_failures=3, on_cause={"node_died": "give_up"})
    state = TrialState("t", policy=policy)
    for event in _attempts(actor_death("unknown"), 1):
        apply(state, event)
    before = state.copy()
    record = apply(state, DeathCauseLearned(3, ActorDeath(DeathCause.NODE_DIED), "state_api"))
    assert replace(state, seq=before.seq) == before  # not even the last error
    assert (record.decision, record.error, record.counters) == (None, None, before.counters)


# ---------------------------------------------------------------- rules, as properties

#: Failures as the rules per cause read them: actor deaths of common causes, the same
#: message and iteration often (repeats), sometimes anything at all.
_iterations = st.sampled_from([1, 1, 1, 2, None])
_failures = st.one_of(
    st.builds(actor_death, st.sampled_from(["node_died", "oom", "preempted", "unknown",
                                            "worker_crashed"]),
              st.sampled_from(["died", "gone"]), _iterations),
    st.builds(lambda m, i: TrialFailed(TrainingError("builtins.ValueError", m), iteration=i),
              st.sampled_from(["nan"]) | messages, _iterations),
    EVENT_STRATEGIES[TrialFailed],
)


def _step(data: st.DataObject, status: Status) -> Event:
    """The next event: mostly a failure while active, a start when pending, a requeue when
    ended; else any event (the domain strategies)."""
    roll = data.draw(st.integers(0, 9), label="roll")
    if status in (Status.RUNNING, Status.PAUSED) and roll < 6:
        return data.draw(_failures, label="failure")
    if status is Status.RUNNING and roll < 7:
        return CheckpointSaved("c1")
    if status is Status.PENDING and roll < 4:
        return data.draw(_failures, label="failure")
    if status is Status.PENDING and roll < 8:
        return TrialStarted()
    if status is Status.RESTORING and roll < 5:
        return RestoreSucceeded()
    if status.is_terminal and roll < 7:
        return TrialReset(from_scratch=roll < 2)
    return event_step(data, status)



class _Repeats:
    """The failures in a row, counted from the events (not from the machine)."""

    def __init__(self) -> None:
        self.last: tuple[Any, ...] | None = None
        self.run = 0

    def see(self, event: Event) -> int | None:
        if isinstance(event, TrialRecreated):
            self.last, self.run = None, 0
        elif isinstance(event, TrialReset) and event.from_scratch:
            self.run = 0
        if not isinstance(event, TrialFailed):
            return None
        e = event.error
        signature = (e.kind, e.cause_type, e.message, event.iteration)
        if event.iteration is None:
            self.run = 0
        else:
            self.run = self.run + 1 if signature == self.last else 1
        self.last = signature
        return self.run


def _expected(before: TrialState, event: TrialFailed, p: RetryPolicy,
              run: int) -> tuple[str, Decision, int, int, int]:
    """The rule's words: (rule, decision, failures, preemptions, this cause's retries)."""
    error, f = event.error, before.failures
    within = p.max_failures < 0 or f <= p.max_failures
    cause = error.cause if isinstance(error, ActorError) else None
    retries = before.cause_retry_count(cause.value) if cause else 0
    if not error.retryable or p.is_fatal(error.cause_type):
        return "fatal", Decision.GIVE_UP, f + 1, before.preemptions, retries
    action = p.cause_action(cause) if cause else CauseAction.COUNT
    if action is CauseAction.GIVE_UP:
        return "cause_fatal", Decision.GIVE_UP, f + 1, before.preemptions, retries
    if p.give_up_on_repeats is not None and run >= p.give_up_on_repeats:
        return "repeated", Decision.GIVE_UP, f + 1, before.preemptions, retries
    if action is CauseAction.RETRY_NOT_COUNTED and cause is DeathCause.PREEMPTED:
        budget = p.max_preemptions
        ok = (budget is None or before.preemptions + 1 <= budget) and within
        return ("preempted_recover" if ok else "preempted_give_up",
                Decision.RECOVER_PREEMPTED if ok else Decision.GIVE_UP, f,
                before.preemptions + 1, retries)
    if action is CauseAction.RETRY_NOT_COUNTED:
        assert cause is not None
        budget = p.cause_budgets.get(cause.value)
        ok = (budget is None or retries + 1 <= budget) and within
        return ("cause_recover" if ok else "cause_give_up",
                Decision.RECOVER_NOT_COUNTED if ok else Decision.GIVE_UP, f,
                before.preemptions, retries + 1)
    ok = p.max_failures < 0 or f + 1 <= p.max_failures
    return ("recover" if ok else "give_up", Decision.RECOVER if ok else Decision.GIVE_UP,
            f + 1, before.preemptions, retries)


_COMMON = ["node_died", "oom", "preempted", "unknown", "worker_crashed"]


@st.composite
def _ruled_policies(draw: st.DrawFn) -> RetryPolicy:
    """A policy with rules for the causes the failures above die of, and often repeats."""
    base = draw(policies)
    on_cause = draw(st.dictionaries(st.sampled_from(_COMMON),
                                    st.sampled_from(list(CauseAction)), min_size=1))
    if base.count_preemption_as_failure and on_cause.get("preempted") is (
            CauseAction.RETRY_NOT_COUNTED):
        del on_cause["preempted"]
    uncounted = [c for c, a in on_cause.items()
                 if a is CauseAction.RETRY_NOT_COUNTED and c != "preempted"]
    budgets = {c: draw(st.integers(0, 2)) for c in uncounted if draw(st.booleans())}
    return base.replace(on_cause=on_cause, cause_budgets=budgets,
                        give_up_on_repeats=draw(st.none() | st.integers(2, 3)))


@settings(PROPERTY, max_examples=120)
@given(st.data(), _ruled_policies(), st.integers(1, 50))
def test_each_rule_per_cause_does_what_it_says(
    data: st.DataObject, policy: RetryPolicy, length: int
) -> None:
    state, repeats = TrialState("t", policy=policy), _Repeats()
    for _ in range(length):
        event = _step(data, state.status)
        before = state.copy()
        try:
            record = apply(state, event, policy)
        except InvalidTransitionError:
            continue
        run = repeats.see(event)
        if not isinstance(event, TrialFailed) or before.status not in ACTIVE:
            continue
        assert record.rule is not None
        if record.rule.user_restore:
            continue  # a failure of the user's own restore follows the restore rules
        assert run is not None and state.repeats == run
        name, decision, failures, preemptions, retries = _expected(before, event, policy, run)
        assert (record.rule.name, record.decision) == (name, decision)
        assert (state.failures, state.preemptions) == (failures, preemptions)
        cause = event.error.cause if isinstance(event.error, ActorError) else None
        if cause is not None:
            assert state.cause_retry_count(cause.value) == retries
        budget = policy.cause_budgets.get(cause.value) if cause else None
        if budget is not None:  # a budget is never overdrawn by a recovery
            recovered = record.decision is Decision.RECOVER_NOT_COUNTED
            assert not recovered or state.cause_retry_count(cause.value) <= budget  # type: ignore[union-attr]


def _bare(event: Event) -> Event:
    """The event as a log written before causes: a preemption or nothing, no iteration."""
    if not isinstance(event, TrialFailed):
        return event
    error = event.error
    if isinstance(error, ActorError):
        error = ActorError(error.cause_type, error.message, error.traceback,
                           preempted=error.preempted)
    return TrialFailed(error, event.node)


def _rays(policy: RetryPolicy) -> RetryPolicy:
    return policy.replace(on_cause={}, cause_budgets={}, give_up_on_repeats=None)


@PROPERTY
@given(st.data(), policies, st.integers(1, 50))
def test_the_default_is_rays_whatever_the_cause(
    data: st.DataObject, policy: RetryPolicy, length: int
) -> None:
    # Without rules per cause or repeats, what Ray said about a death (but "preempted") and
    # the iteration change no decision: the fold decides as it did before causes existed
    # (which the differential test holds equal to Ray). Rules that spell out the defaults
    # are the default.
    ray = _rays(policy)
    spelled = ray.replace(on_cause={c.value: ray.cause_action(c) for c in DeathCause})
    states = [TrialState("t", policy=ray) for _ in range(3)]
    for _ in range(length):
        event = _step(data, states[0].status)
        if isinstance(event, PolicySet):
            continue  # (it would replace the policies under comparison)
        results = []
        for state, variant, p in zip(states, (event, _bare(event), event),
                                     (ray, ray, spelled), strict=True):
            try:
                record = apply(state, variant, p)
            except InvalidTransitionError:
                results.append(None)
                continue
            results.append((record.status_after, record.decision, record.counters,
                            record.rule.name if record.rule else None))
        assert results[0] == results[1] == results[2]


@PROPERTY
@given(st.data(), policies | st.none(), st.integers(1, 40), st.lists(deaths, max_size=4))
def test_a_cause_learned_late_never_changes_the_fold(
    data: st.DataObject, policy: RetryPolicy | None, length: int, learned: list[ActorDeath]
) -> None:
    plain, amended = TrialState("t"), TrialState("t")
    for _ in range(length):
        event = _step(data, plain.status)
        if learned and data.draw(st.booleans(), label="amend here?"):
            record = apply(amended, DeathCauseLearned(plain.seq, learned.pop(), "state_api"),
                           policy)
            assert record.decision is None and record.status_after is amended.status
        try:
            expected = apply(plain, event, policy)
        except InvalidTransitionError:
            continue
        got = apply(amended, event, policy)
        assert got == expected
        assert replace(amended, seq=plain.seq) == plain  # (amendments are events too)


def test_every_training_rule_for_a_cause_is_reached_by_hand() -> None:
    # (the corpus of the revision test holds them too; these are the plain cases)
    reached = set()
    for policy, failure, times in [
        (RetryPolicy(on_cause={"oom": "give_up"}), actor_death("oom"), 1),
        (RetryPolicy(on_cause={"unknown": "retry_not_counted"}), actor_death("unknown"), 2),
        (RetryPolicy(on_cause={"unknown": "retry_not_counted"}, cause_budgets={"unknown": 0}),
         actor_death("unknown"), 1),
        (RetryPolicy(max_failures=3, give_up_on_repeats=2),
         TrialFailed(training_error().error, iteration=1), 2),
    ]:
        for record in _fold(policy, _attempts(failure, times)):
            if record.error is not None and record.rule is not None:
                reached.add(str(record.rule.name))
    assert {"cause_fatal", "cause_recover", "cause_give_up", "repeated"} <= reached
