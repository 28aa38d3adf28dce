"""The trial state machine: every row of the transition table, the exhaustion actions,
preemption, fatal errors, invalid transitions and the determinism of the fold."""

from __future__ import annotations

import json

import pytest
from domain_strategies import (
    PROPERTY,
    abort_error,
    actor_error,
    event_step,
    policies,
    restore_error,
    training_error,
)
from hypothesis import given
from hypothesis import strategies as st

from statemachine.domain.events import (
    EVENT_TYPES,
    CheckpointSaved,
    CheckpointsDiscarded,
    Event,
    PolicySet,
    RestoreSucceeded,
    TrialAdded,
    TrialCompleted,
    TrialFailed,
    TrialPaused,
    TrialReset,
    TrialResumed,
    TrialStarted,
    TrialStopped,
)
from statemachine.domain.failures import TrainingError
from statemachine.domain.machine import MACHINE, apply, fold
from statemachine.domain.policy import ExhaustionAction, RetryPolicy
from statemachine.domain.state import Counters, TrialState
from statemachine.domain.status import Decision, Status
from statemachine.exceptions import InvalidTransitionError

D = Decision
RETRY_CKPT = ExhaustionAction.RETRY_CHECKPOINT
SCRATCH = ExhaustionAction.RESTART_FROM_SCRATCH
PREVIOUS = ExhaustionAction.PREVIOUS_CHECKPOINT

#: Events that bring a new trial to each status (RESTORING from a known checkpoint "c1").
TO = {
    Status.NEW: [],
    Status.PENDING: [TrialAdded()],
    Status.RUNNING: [TrialAdded(), TrialStarted()],
    Status.PAUSED: [TrialAdded(), TrialStarted(), TrialPaused()],
    Status.RESTORING: [TrialAdded(), TrialStarted(), CheckpointSaved("c1"), TrialPaused(),
                       TrialResumed(), TrialStarted()],
    Status.TERMINATED: [TrialAdded(), TrialStarted(), TrialCompleted()],
    Status.ERROR: [TrialAdded(), TrialStarted(), abort_error()],
}


def policy(**fields: object) -> RetryPolicy:
    """A policy with Ray's defaults except ``fields``."""
    return RetryPolicy(**fields)  # type: ignore[arg-type]


def run(events: list[Event], p: RetryPolicy | None = None) -> TrialState:
    """Fold ``events`` for trial ``t1`` and return the final state."""
    return fold("t1", events, p)[0]


def test_prefixes_reach_their_status() -> None:
    for status, events in TO.items():
        assert run(events).status is status


# ---------------------------------------------------------------- every row of the table

# (row, policy, from status, event, status after, decision, counters after)
ROWS = [
    ("add", policy(), Status.NEW, TrialAdded(), Status.PENDING, None, (0, 0, 0, 0)),
    ("start, no checkpoint", policy(), Status.PENDING, TrialStarted(), Status.RUNNING, None,
     (0, 0, 0, 0)),
    ("start, checkpoint named", policy(), Status.PENDING, TrialStarted(restore_from="x"),
     Status.RESTORING, None, (0, 0, 0, 0)),
    ("restored", policy(), Status.RESTORING, RestoreSucceeded(), Status.RUNNING, None,
     (0, 0, 0, 0)),
    ("checkpoint", policy(), Status.RUNNING, CheckpointSaved("c9"), Status.RUNNING, None,
     (0, 0, 0, 0)),
    ("pause", policy(), Status.RUNNING, TrialPaused(), Status.PAUSED, None, (0, 0, 0, 0)),
    ("resume", policy(), Status.PAUSED, TrialResumed(), Status.PENDING, None, (0, 0, 0, 0)),
    ("complete", policy(), Status.RUNNING, TrialCompleted(), Status.TERMINATED, None,
     (0, 0, 0, 0)),
    ("stop pending", policy(), Status.PENDING, TrialStopped(), Status.TERMINATED, None,
     (0, 0, 0, 0)),
    ("stop running", policy(), Status.RUNNING, TrialStopped(), Status.TERMINATED, None,
     (0, 0, 0, 0)),
    ("stop paused", policy(), Status.PAUSED, TrialStopped(), Status.TERMINATED, None,
     (0, 0, 0, 0)),
    ("stop restoring", policy(), Status.RESTORING, TrialStopped(), Status.TERMINATED, None,
     (0, 0, 0, 0)),
    ("restore fail, retry left", policy(restore_retry_num=1), Status.RESTORING,
     restore_error(), Status.PENDING, D.RETRY_RESTORE, (0, 1, 1, 0)),
    ("restore fail, retries spent, within max_failures", policy(max_failures=1),
     Status.RESTORING, restore_error(), Status.PENDING, D.RECOVER, (1, 0, 1, 0)),
    ("restore fail, otherwise", policy(max_failures=0), Status.RESTORING, restore_error(),
     Status.ERROR, D.GIVE_UP, (1, 0, 1, 0)),
    ("training fail within", policy(max_failures=1), Status.RUNNING, training_error(),
     Status.PENDING, D.RECOVER, (1, 0, 0, 0)),
    ("actor fail within", policy(max_failures=1), Status.RUNNING, actor_error(),
     Status.PENDING, D.RECOVER, (1, 0, 0, 0)),
    ("preempted, not counted", policy(max_failures=0), Status.RUNNING,
     actor_error(preempted=True), Status.PENDING, D.RECOVER_PREEMPTED, (0, 0, 0, 1)),
    ("training fail, otherwise", policy(max_failures=0), Status.RUNNING, training_error(),
     Status.ERROR, D.GIVE_UP, (1, 0, 0, 0)),
    ("abort while running", policy(max_failures=-1), Status.RUNNING, abort_error(),
     Status.ERROR, D.GIVE_UP, (1, 0, 0, 0)),
    ("abort while restoring", policy(max_failures=-1, restore_retry_num=3), Status.RESTORING,
     abort_error(), Status.ERROR, D.GIVE_UP, (1, 0, 0, 0)),
    # Beyond DESIGN.md's table: what Ray does too.
    ("actor creation fails while pending", policy(max_failures=1), Status.PENDING,
     actor_error(), Status.PENDING, D.RECOVER, (1, 0, 0, 0)),
    ("actor dies while paused", policy(max_failures=1), Status.PAUSED, actor_error(),
     Status.PENDING, D.RECOVER, (1, 0, 0, 0)),
    ("requeue a running trial after a driver restart", policy(), Status.RUNNING,
     TrialResumed(), Status.PENDING, None, (0, 0, 0, 0)),
    ("requeue a restoring trial after a driver restart", policy(), Status.RESTORING,
     TrialResumed(), Status.PENDING, None, (0, 0, 0, 0)),
    ("reset an errored trial", policy(), Status.ERROR, TrialReset(), Status.PENDING, None,
     (1, 0, 0, 0)),
    ("restart an errored trial from scratch", policy(), Status.ERROR,
     TrialReset(from_scratch=True), Status.PENDING, None, (0, 0, 0, 0)),
    ("reset a terminated trial", policy(), Status.TERMINATED, TrialReset(), Status.PENDING,
     None, (0, 0, 0, 0)),
]


@pytest.mark.parametrize(
    ("p", "source", "event", "dest", "decision", "counters"),
    [row[1:] for row in ROWS],
    ids=[row[0] for row in ROWS],
)
def test_transition_table_row(
    p: RetryPolicy,
    source: Status,
    event: Event,
    dest: Status,
    decision: Decision | None,
    counters: tuple[int, int, int, int],
) -> None:
    state = run(TO[source], p)
    assert state.status is source
    record = apply(state, event, p)
    assert (record.status_before, record.status_after) == (source, dest)
    assert state.status is dest
    assert record.decision is decision
    assert record.counters == Counters(*counters) == state.counters
    assert record.trial_id == "t1"
    assert record.event == event.type_name
    if isinstance(event, TrialFailed):
        assert record.error == event.error == state.last_error
        assert state.last_decision is decision
    else:
        assert record.error is None


def test_start_restores_from_latest_known_checkpoint() -> None:
    state = run([TrialAdded(), CheckpointSaved("c1"), CheckpointSaved("c2"), TrialStarted()])
    assert state.status is Status.RESTORING
    assert state.restoring_from == "c2"


def test_restore_succeeded_ends_the_episode() -> None:
    p = policy(restore_retry_num=3, max_failures=1)
    events = [*TO[Status.RESTORING], restore_error(), TrialStarted(), restore_error()]
    state = run(events, p)
    assert (state.status, state.restore_failures, state.total_restore_failures) == (
        Status.PENDING, 2, 2)
    apply(state, TrialStarted(), p)
    apply(state, RestoreSucceeded(), p)
    assert state.status is Status.RUNNING
    assert state.counters == Counters(0, 0, 2, 0)
    assert state.restoring_from is None


def test_restore_episode_counter_refers_to_one_checkpoint() -> None:
    p = policy(restore_retry_num=3)
    state = run([*TO[Status.RESTORING], restore_error()], p)
    assert state.counters == Counters(0, 1, 1, 0)
    apply(state, TrialStarted(), p)  # the same checkpoint again: same episode
    assert (state.restoring_from, state.restore_failures) == ("c1", 1)
    apply(state, restore_error(), p)
    assert state.status is Status.PENDING
    apply(state, TrialStarted(restore_from="c0"), p)  # another checkpoint: a new episode
    assert (state.restoring_from, state.restore_failures) == ("c0", 0)
    assert state.total_restore_failures == 2


def test_checkpoint_saved_is_the_latest_and_history_is_bounded() -> None:
    events: list[Event] = [TrialAdded(), TrialStarted()]
    events += [CheckpointSaved(f"c{i}") for i in range(40)] + [CheckpointSaved("c5")]
    state = run(events)
    assert state.latest_checkpoint == "c5"
    assert len(state.checkpoints) == 32
    assert state.checkpoints.count("c5") == 1


def test_discarded_checkpoints_are_forgotten() -> None:
    events = [TrialAdded(), TrialStarted(), CheckpointSaved("a"), CheckpointSaved("b"),
              CheckpointsDiscarded(("b", "zzz"))]
    state = run(events)
    assert state.checkpoints == ("a",)
    assert state.status is Status.RUNNING


def test_policy_set_event_is_in_force_and_an_explicit_policy_overrides_it() -> None:
    events = [PolicySet(policy(max_failures=2)), TrialAdded(), TrialStarted(),
              training_error(), TrialStarted(), training_error()]
    state, records = fold("t1", events)
    assert state.policy.max_failures == 2
    assert [r.decision for r in records[-3::2]] == [D.RECOVER, D.RECOVER]
    what_if, _ = fold("t1", events, policy(max_failures=1))
    assert (what_if.status, what_if.failures) == (Status.ERROR, 2)


# ---------------------------------------------------------------- restore retries, exhaustion


def restore_attempts(p: RetryPolicy, failures: int, prefix: list[Event] | None = None
                     ) -> tuple[TrialState, list[Decision | None]]:
    """From RESTORING, fail the restore ``failures`` times, restarting after each recovery."""
    state = run(prefix or TO[Status.RESTORING], p)
    decisions = []
    for _ in range(failures):
        if state.status is Status.PENDING:
            apply(state, TrialStarted(), p)
        decisions.append(apply(state, restore_error(), p).decision)
        if state.status is Status.ERROR:
            break
    return state, decisions


def test_restore_retries_do_not_count_against_max_failures() -> None:
    p = policy(max_failures=0, restore_retry_num=2)
    state, decisions = restore_attempts(p, 3)
    assert decisions == [D.RETRY_RESTORE, D.RETRY_RESTORE, D.GIVE_UP]
    assert state.counters == Counters(1, 2, 3, 0)
    assert state.status is Status.ERROR


def test_retry_checkpoint_keeps_restoring_the_same_checkpoint_each_failure_counted() -> None:
    p = policy(max_failures=2, restore_retry_num=1, on_restore_exhausted=RETRY_CKPT)
    state, decisions = restore_attempts(p, 5)
    assert decisions == [D.RETRY_RESTORE, D.RECOVER, D.RECOVER, D.GIVE_UP]
    # Like Ray, the episode counter stays at restore_retry_num once spent.
    assert state.counters == Counters(3, 1, 4, 0)
    assert state.checkpoints == ("c1",)


def test_retry_checkpoint_restarts_from_the_same_checkpoint() -> None:
    p = policy(max_failures=5, restore_retry_num=0)
    state, _ = restore_attempts(p, 1)
    apply(state, TrialStarted(), p)
    assert (state.status, state.restoring_from) == (Status.RESTORING, "c1")


def test_restart_from_scratch_discards_checkpoints_and_trains_anew() -> None:
    p = policy(max_failures=5, restore_retry_num=1, on_restore_exhausted=SCRATCH)
    state, decisions = restore_attempts(p, 2)
    assert decisions == [D.RETRY_RESTORE, D.RESTART_FROM_SCRATCH]
    assert state.checkpoints == ()
    assert state.counters == Counters(1, 0, 2, 0)
    apply(state, TrialStarted(), p)
    assert state.status is Status.RUNNING


def test_previous_checkpoint_falls_back_to_an_older_checkpoint() -> None:
    p = policy(max_failures=5, restore_retry_num=1, on_restore_exhausted=PREVIOUS)
    prefix = [TrialAdded(), TrialStarted(), CheckpointSaved("c1"), CheckpointSaved("c2"),
              CheckpointSaved("c3"), TrialPaused(), TrialResumed(), TrialStarted()]
    state, decisions = restore_attempts(p, 2, prefix)
    assert decisions == [D.RETRY_RESTORE, D.PREVIOUS_CHECKPOINT]
    assert state.checkpoints == ("c1", "c2")
    assert state.counters == Counters(1, 0, 2, 0)
    apply(state, TrialStarted(), p)
    assert (state.status, state.restoring_from) == (Status.RESTORING, "c2")
    # The older checkpoint gets a fresh set of restore retries.
    assert apply(state, restore_error(), p).decision is D.RETRY_RESTORE


def test_previous_checkpoint_without_an_older_one_restarts_from_scratch() -> None:
    p = policy(max_failures=5, restore_retry_num=0, on_restore_exhausted=PREVIOUS)
    state, decisions = restore_attempts(p, 1)
    assert decisions == [D.RESTART_FROM_SCRATCH]
    assert state.checkpoints == ()
    apply(state, TrialStarted(), p)
    assert state.status is Status.RUNNING


def test_previous_checkpoint_walks_back_then_restarts_from_scratch() -> None:
    p = policy(max_failures=-1, on_restore_exhausted=PREVIOUS)
    prefix = [TrialAdded(), CheckpointSaved("c1"), CheckpointSaved("c2"), TrialStarted()]
    state, decisions = restore_attempts(p, 2, prefix)
    assert decisions == [D.PREVIOUS_CHECKPOINT, D.RESTART_FROM_SCRATCH]
    assert state.checkpoints == ()
    assert state.counters == Counters(2, 0, 2, 0)
    apply(state, TrialStarted(), p)
    assert state.status is Status.RUNNING


def test_previous_checkpoint_when_the_restored_checkpoint_is_unknown() -> None:
    p = policy(max_failures=5, on_restore_exhausted=PREVIOUS)
    state = run([TrialAdded(), CheckpointSaved("c1"), TrialStarted(restore_from="elsewhere")])
    assert apply(state, restore_error(), p).decision is D.PREVIOUS_CHECKPOINT
    assert state.checkpoints == ("c1",)
    apply(state, TrialStarted(), p)
    assert state.restoring_from == "c1"


def test_exhaustion_past_max_failures_gives_up_whatever_the_action() -> None:
    for action in ExhaustionAction:
        p = policy(max_failures=0, restore_retry_num=0, on_restore_exhausted=action)
        state, decisions = restore_attempts(p, 1)
        assert decisions == [D.GIVE_UP], action
        assert state.status is Status.ERROR
        assert state.checkpoints == ("c1",)


def test_restore_retry_refused_for_a_trial_already_past_max_failures() -> None:
    # As Ray: resume_errored keeps num_failures; the retry is counted, then should_recover()
    # is false, so the trial errors again.
    p = policy(max_failures=0, restore_retry_num=2)
    events = [TrialAdded(), CheckpointSaved("c1"), TrialStarted(), restore_error(),
              restore_error(), TrialStarted(), restore_error()]
    state = run(events[:3], p)
    for event in events[3:]:
        if state.status is Status.PENDING:
            apply(state, TrialStarted(), p)
        if isinstance(event, TrialFailed):
            apply(state, event, p)
    assert (state.status, state.failures) == (Status.ERROR, 1)
    apply(state, TrialReset(), p)
    apply(state, TrialStarted(), p)
    record = apply(state, restore_error(), p)
    assert (record.status_after, record.decision) == (Status.ERROR, D.GIVE_UP)
    assert state.counters == Counters(1, 1, 4, 0)


# ---------------------------------------------------------------- preemption


def preempt(p: RetryPolicy, times: int) -> tuple[TrialState, list[Decision | None]]:
    """Start the trial and have its node preempted ``times`` times."""
    state = run(TO[Status.RUNNING], p)
    decisions = []
    for _ in range(times):
        if state.status is Status.PENDING:
            apply(state, TrialStarted(), p)
        decisions.append(apply(state, actor_error(preempted=True), p).decision)
        if state.status is Status.ERROR:
            break
    return state, decisions


def test_preemption_not_counted_recovers_forever_by_default() -> None:
    state, decisions = preempt(policy(max_failures=0), 10)
    assert decisions == [D.RECOVER_PREEMPTED] * 10
    assert state.counters == Counters(0, 0, 0, 10)


def test_preemption_counted_as_failure() -> None:
    p = policy(max_failures=1, count_preemption_as_failure=True)
    state, decisions = preempt(p, 3)
    assert decisions == [D.RECOVER, D.GIVE_UP]
    assert state.counters == Counters(2, 0, 0, 0)


def test_separate_preemption_budget() -> None:
    p = policy(max_failures=5, max_preemptions=2)
    state, decisions = preempt(p, 5)
    assert decisions == [D.RECOVER_PREEMPTED, D.RECOVER_PREEMPTED, D.GIVE_UP]
    assert state.status is Status.ERROR
    assert state.counters == Counters(0, 0, 0, 3)


def test_zero_preemption_budget_gives_up_at_the_first_preemption() -> None:
    state, decisions = preempt(policy(max_failures=5, max_preemptions=0), 1)
    assert decisions == [D.GIVE_UP]
    assert (state.status, state.preemptions) == (Status.ERROR, 1)


def test_preemption_budget_is_separate_from_max_failures() -> None:
    p = policy(max_failures=1, max_preemptions=1)
    state = run(TO[Status.RUNNING], p)
    assert apply(state, training_error(), p).decision is D.RECOVER
    apply(state, TrialStarted(), p)
    assert apply(state, actor_error(preempted=True), p).decision is D.RECOVER_PREEMPTED
    apply(state, TrialStarted(), p)
    assert apply(state, actor_error(preempted=False), p).decision is D.GIVE_UP
    assert state.counters == Counters(2, 0, 0, 1)


def test_preemption_while_restoring_follows_the_restore_rules() -> None:
    p = policy(max_failures=0, restore_retry_num=1)
    state = run(TO[Status.RESTORING], p)
    assert apply(state, actor_error(preempted=True), p).decision is D.RETRY_RESTORE
    assert state.counters == Counters(0, 1, 1, 0)


def test_preemption_of_a_trial_past_max_failures_gives_up() -> None:
    p = policy(max_failures=0)
    state = run([*TO[Status.RUNNING], training_error(), TrialReset(), TrialStarted()], p)
    assert state.failures == 1
    record = apply(state, actor_error(preempted=True), p)
    assert (record.status_after, record.decision) == (Status.ERROR, D.GIVE_UP)


# ---------------------------------------------------------------- fatal errors


@pytest.mark.parametrize("listed", ["KeyError", "builtins.KeyError"])
def test_policy_listed_fatal_type_gives_up(listed: str) -> None:
    p = policy(max_failures=-1, fatal_exception_types=(listed,))
    state = run(TO[Status.RUNNING], p)
    record = apply(state, training_error("builtins.KeyError"), p)
    assert (record.status_after, record.decision) == (Status.ERROR, D.GIVE_UP)
    assert state.failures == 1


def test_fatal_types_apply_while_restoring_and_to_preemptions() -> None:
    p = policy(max_failures=-1, restore_retry_num=5, fatal_exception_types=("OSError",))
    state = run(TO[Status.RESTORING], p)
    assert apply(state, restore_error("builtins.OSError"), p).decision is D.GIVE_UP
    p = policy(fatal_exception_types=("ray.exceptions.ActorDiedError",))
    state = run(TO[Status.RUNNING], p)
    assert apply(state, actor_error(preempted=True), p).decision is D.GIVE_UP


def test_unlisted_type_is_not_fatal() -> None:
    p = policy(max_failures=-1, fatal_exception_types=("KeyError", "builtins.OSError"))
    state = run(TO[Status.RUNNING], p)
    assert apply(state, training_error("builtins.ValueError"), p).decision is D.RECOVER


# ---------------------------------------------------------------- invalid transitions

INVALID = [
    (status, cls)
    for status in Status
    for cls in EVENT_TYPES.values()
    if status.name not in MACHINE.events[cls.trigger].transitions
]


def sample_event(cls: type[Event]) -> Event:
    """One event of ``cls``."""
    return cls(TrainingError("builtins.ValueError", "x")) if cls is TrialFailed else cls()


@pytest.mark.parametrize(("status", "cls"), INVALID,
                         ids=[f"{s.name}-{c.type_name}" for s, c in INVALID])
def test_invalid_event_raises_naming_trial_state_and_event_and_changes_nothing(
    status: Status, cls: type[Event]
) -> None:
    state = run(TO[status])
    before = state.to_dict()
    with pytest.raises(InvalidTransitionError) as info:
        apply(state, sample_event(cls))
    message = str(info.value)
    assert "'t1'" in message and status.value in message and cls.type_name in message
    assert (info.value.trial_id, info.value.status, info.value.event) == (
        "t1", status.value, cls.type_name)
    assert state.to_dict() == before


def test_invalid_pairs_cover_what_the_table_forbids() -> None:
    pairs = {(s, c.type_name) for s, c in INVALID}
    assert (Status.NEW, "TrialStarted") in pairs
    assert (Status.RUNNING, "TrialAdded") in pairs
    assert (Status.TERMINATED, "TrialFailed") in pairs
    assert (Status.ERROR, "TrialStarted") in pairs
    assert (Status.RESTORING, "TrialPaused") in pairs
    assert (Status.PENDING, "RestoreSucceeded") in pairs


def test_fold_stops_at_an_invalid_event_and_leaves_the_given_state_alone() -> None:
    start = run([TrialAdded()])
    before = start.to_dict()
    with pytest.raises(InvalidTransitionError, match="TrialCompleted"):
        fold("t1", [TrialStarted(), TrialCompleted(), TrialCompleted()], state=start)
    assert start.to_dict() == before


# ---------------------------------------------------------------- determinism


@st.composite
def histories(draw: st.DrawFn) -> tuple[RetryPolicy, list[Event]]:
    """A policy and a valid event history drawn state by state."""
    p = draw(policies)
    data = draw(st.data())
    state = TrialState("t1")
    events: list[Event] = []
    for _ in range(draw(st.integers(0, 30))):
        event = event_step(data, state.status)
        try:
            apply(state, event, p)
        except InvalidTransitionError:
            continue
        events.append(event)
    return p, events


@PROPERTY
@given(histories(), st.integers(0, 30))
def test_fold_is_deterministic_and_resumable(
    history: tuple[RetryPolicy, list[Event]], cut: int
) -> None:
    p, events = history
    first, records = fold("t1", events, p)
    second, again = fold("t1", events, p)
    assert first == second and records == again
    assert first.seq == len(events) == len(records)
    head, head_records = fold("t1", events[:cut], p)
    head_copy = head.to_dict()
    tail, tail_records = fold("t1", events[cut:], p, state=head)
    assert head.to_dict() == head_copy
    assert tail == first and head_records + tail_records == records
    assert TrialState.from_dict(json.loads(json.dumps(first.to_dict()))) == first
    for record in records:
        data = json.loads(json.dumps(record.to_dict()))
        assert data["status_after"] == record.status_after.value
        assert data["counters"]["failures"] == record.counters.failures
    for before, record in zip([None, *records], records, strict=False):
        if before is not None:
            assert record.status_before is before.status_after


@PROPERTY
@given(histories())
def test_the_rule_of_a_record_names_the_counters_it_incremented(
    history: tuple[RetryPolicy, list[Event]],
) -> None:
    # What a record's rule says it counted (its budgets, read from the Machine's effects)
    # is exactly what went up: the one numbering of failures (Rule.numbers) reads them.
    p, events = history
    state = TrialState("t1")
    for event in events:
        before = state.counters
        retries_before = dict(state.cause_retries)
        record = apply(state, event, p)
        assert record.rule is not None and record.rule.name in {
            str(t.rule.name) for ts in MACHINE.events[event.trigger].transitions.values()
            for t in ts}
        went_up = {name for name, old, new in zip(Counters._fields, before, record.counters,
                                                  strict=True) if new > old}
        if dict(state.cause_retries) != retries_before:  # the uncounted retries of a cause
            (cause,) = {c for c, n in state.cause_retries if n != retries_before.get(c, 0)}
            assert state.cause_retry_count(cause) == retries_before.get(cause, 0) + 1
            assert record.cause_retries == state.cause_retry_count(cause)
            went_up.add("cause_retries")
        counted = set(record.rule.counts)
        numbers = record.numbers()
        assert (numbers.failure is not None) is ("failures" in counted)
        assert (numbers.cause_retry is not None) is ("cause_retries" in counted)
        if not isinstance(event, TrialFailed):  # (CountersAdopted sets counters: no failure)
            assert not counted and numbers == (None, None, None, None, None)
            continue
        assert record.decision is not None and counted <= went_up
        # A failure of the user's own restore reopens the episode Ray had closed: its
        # counter comes back without being counted again (restore_fatal).
        assert went_up - counted <= ({"restore_failures"} if record.rule.user_restore else set())
