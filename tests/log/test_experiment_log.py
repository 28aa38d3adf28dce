"""The live registry and replay, run unchanged against a SQLite file and PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import delete, update

from statemachine import (
    CheckpointSaved,
    Decision,
    ExhaustionAction,
    InvalidTransitionError,
    PolicySet,
    RestoreError,
    RestoreSucceeded,
    RetryPolicy,
    Status,
    TrainingError,
    TrialAdded,
    TrialCompleted,
    TrialFailed,
    TrialStarted,
    fold,
)
from statemachine.exceptions import FencedError, StoreError
from statemachine.log import (
    EventStore,
    ExperimentLog,
    rehydrate,
    replay_experiment,
    replay_trial,
    verify,
)
from statemachine.log.schema import events

POLICY = RetryPolicy(max_failures=1, restore_retry_num=2)


def restore_failure() -> TrialFailed:
    return TrialFailed(error=RestoreError("ray.exceptions.RayTaskError", "checkpoint unreadable"))


def training_failure() -> TrialFailed:
    return TrialFailed(error=TrainingError("builtins.ValueError", "nan loss"))


def start_with_checkpoint(log: ExperimentLog, trial_id: str) -> None:
    log.record(trial_id, TrialAdded())
    log.record(trial_id, TrialStarted())
    log.record(trial_id, CheckpointSaved("ckpt_1"))
    log.record(trial_id, training_failure())  # RECOVER: failures 1


class LogContract:
    """Every behaviour of :class:`ExperimentLog` and :mod:`statemachine.log.replay`."""

    @pytest.fixture
    def url(self) -> str:
        raise NotImplementedError

    @pytest.fixture
    def store(self, url: str) -> Iterator[EventStore]:
        store = EventStore.open(url)
        yield store
        store.close()

    def test_record_returns_the_decision_and_keeps_state(self, store: EventStore) -> None:
        log = ExperimentLog.open(store, "exp", POLICY)
        start_with_checkpoint(log, "t1")
        log.record("t1", TrialStarted())
        record = log.record("t1", restore_failure())
        assert record.decision is Decision.RETRY_RESTORE
        assert (record.status_before, record.status_after) == (Status.RESTORING, Status.PENDING)
        state = log.state("t1")
        assert state is not None
        assert (state.failures, state.restore_failures, state.policy) == (1, 1, POLICY)
        assert log.state("unknown") is None
        log.close()

    def test_log_rows_match_the_fold_of_the_same_events(self, store: EventStore) -> None:
        log = ExperimentLog.open(store, "exp", POLICY)
        start_with_checkpoint(log, "t1")
        rows = store.read_trial("exp", "t1")
        assert rows[0].event == PolicySet(policy=POLICY)  # the session's policy, first
        folded, records = fold("t1", [r.event for r in rows])
        assert folded == log.state("t1")
        assert [r.status_after for r in rows] == [rec.status_after.value for rec in records]
        assert rows[-1].decision == "RECOVER" and rows[-1].error_type == "TrainingError"
        log.close()

    def test_no_policy_event_when_the_session_uses_the_default_policy(
        self, store: EventStore
    ) -> None:
        with ExperimentLog.open(store, "exp", RetryPolicy()) as log:
            log.record("t1", TrialAdded())
        assert [e.type_name for e in store.read_trial("exp", "t1")] == ["TrialAdded"]

    def test_invalid_event_changes_nothing(self, store: EventStore) -> None:
        log = ExperimentLog.open(store, "exp", POLICY)
        log.record("t1", TrialAdded())
        before = log.state("t1")
        with pytest.raises(InvalidTransitionError):
            log.record("t1", RestoreSucceeded())
        assert log.state("t1") == before
        assert len(store.read_trial("exp", "t1")) == 2
        log.close()

    def test_record_many_is_one_atomic_transaction(self, store: EventStore) -> None:
        log = ExperimentLog.open(store, "exp", POLICY)
        records = log.record_many([("a", TrialAdded()), ("b", TrialAdded()), ("a", TrialStarted())])
        assert [r.status_after for r in records] == [Status.PENDING, Status.PENDING, Status.RUNNING]
        with pytest.raises(InvalidTransitionError):
            log.record_many([("c", TrialAdded()), ("a", RestoreSucceeded())])
        assert log.state("c") is None
        assert store.list_trials("exp") == ["a", "b"]
        log.close()

    def test_preview_writes_nothing(self, store: EventStore) -> None:
        log = ExperimentLog.open(store, "exp", POLICY)
        start_with_checkpoint(log, "t1")
        log.record("t1", TrialStarted())
        seq = log.state("t1").seq  # type: ignore[union-attr]
        assert log.preview("t1", restore_failure()).decision is Decision.RETRY_RESTORE
        assert log.state("t1").seq == seq  # type: ignore[union-attr]
        assert len(store.read_trial("exp", "t1")) == seq
        log.close()

    def test_reopen_rehydrates_from_snapshots_and_tail(self, store: EventStore) -> None:
        log = ExperimentLog.open(store, "exp", POLICY, snapshot_every=3)
        for i in range(4):
            start_with_checkpoint(log, f"t{i}")
        expected = log.states()
        snaps = store.load_snapshots("exp")
        assert snaps and all(s.seq % 3 == 0 for s in snaps.values())
        log.close(clean=False)  # a crash: no closing snapshots
        again = ExperimentLog.open(store, "exp", POLICY)
        assert again.states() == expected
        assert again.session.epoch == 2
        again.close()
        assert {s.seq for s in store.load_snapshots("exp").values()} == {5}

    def test_counters_and_next_decision_continue_after_reopen(self, store: EventStore) -> None:
        log = ExperimentLog.open(store, "exp", POLICY)
        start_with_checkpoint(log, "t1")
        log.record("t1", TrialStarted())
        log.record("t1", restore_failure())
        log.close(clean=False)
        log = ExperimentLog.open(store, "exp", POLICY)
        log.record("t1", TrialStarted())
        assert log.record("t1", restore_failure()).decision is Decision.RETRY_RESTORE
        log.record("t1", TrialStarted())
        final = log.record("t1", restore_failure())  # retries spent, failures 2 > 1
        assert final.decision is Decision.GIVE_UP and final.status_after is Status.ERROR
        log.close()

    def test_older_log_is_fenced_and_changes_nothing(self, store: EventStore) -> None:
        old = ExperimentLog.open(store, "exp", POLICY)
        old.record("t1", TrialAdded())
        new = ExperimentLog.open(store, "exp", POLICY)
        with pytest.raises(FencedError):
            old.record("t1", TrialStarted())
        assert old.state("t1").status is Status.PENDING  # type: ignore[union-attr]
        new.record("t1", TrialStarted())
        with pytest.raises(FencedError):
            old.close()
        new.close()
        sessions = store.list_sessions("exp")
        assert [(s.epoch, s.clean_end) for s in sessions] == [(1, False), (2, True)]

    def test_threads_may_share_a_log(self, store: EventStore) -> None:
        log = ExperimentLog.open(store, "exp", POLICY)

        def drive(trial_id: str) -> None:
            start_with_checkpoint(log, trial_id)
            for n in range(10):
                log.record(trial_id, CheckpointSaved(f"{trial_id}_{n}"))

        threads = [threading.Thread(target=drive, args=(f"t{i}",)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert {t: s.seq for t, s in log.states().items()} == {f"t{i}": 15 for i in range(4)}
        log.close()
        assert verify(store, "exp").ok

    def test_closed_log_refuses_records(self, store: EventStore) -> None:
        log = ExperimentLog.open(store, "exp", POLICY)
        log.close()
        with pytest.raises(StoreError, match="closed"):
            log.record("t1", TrialAdded())

    def test_log_opened_by_url_owns_its_store(self, url: str) -> None:
        with ExperimentLog.open(url, "exp", POLICY) as log:
            log.record("t1", TrialAdded())
        with ExperimentLog.open(url, "exp", POLICY) as log:
            assert log.state("t1").status is Status.PENDING  # type: ignore[union-attr]

    # ------------------------------------------------------------ replay

    def test_replay_trial_up_to_a_seq_and_what_if(self, store: EventStore) -> None:
        with ExperimentLog.open(store, "exp", POLICY) as log:
            start_with_checkpoint(log, "t1")
            log.record("t1", TrialStarted())
            log.record("t1", restore_failure())
            log.record("t1", TrialStarted())
            log.record("t1", RestoreSucceeded())
            log.record("t1", TrialCompleted())
        full = replay_trial(store, "exp", "t1")
        assert full.halted_at is None and full.state.status is Status.TERMINATED
        assert [s.record.status_after.value for s in full.steps] == [
            s.stored.status_after for s in full.steps
        ]
        early = replay_trial(store, "exp", "t1", upto_seq=5)
        assert early.state.status is Status.PENDING and early.state.failures == 1
        strict = RetryPolicy(max_failures=0, restore_retry_num=0)
        what_if = replay_trial(store, "exp", "t1", policy=strict)
        assert what_if.state.status is Status.ERROR
        assert what_if.halted_at is not None and what_if.halted_at.type_name == "TrialStarted"
        assert "not valid" in (what_if.halt_reason or "")

    def test_replay_experiment_equals_rehydrate_and_stops_at_a_position(
        self, store: EventStore
    ) -> None:
        with ExperimentLog.open(store, "exp", POLICY, snapshot_every=2) as log:
            for i in range(3):
                start_with_checkpoint(log, f"t{i}")
            live = log.states()
        replays = replay_experiment(store, "exp")
        assert {t: r.state for t, r in replays.items()} == live == rehydrate(store, "exp")
        first = next(iter(store.read_experiment("exp")))
        at_first = replay_experiment(store, "exp", upto_position=first.position)
        assert list(at_first) == [first.trial_id] and at_first[first.trial_id].state.seq == 1

    def test_what_if_exhaustion_action(self, store: EventStore) -> None:
        policy = RetryPolicy(max_failures=3, restore_retry_num=0)
        with ExperimentLog.open(store, "exp", policy) as log:
            start_with_checkpoint(log, "t1")
            log.record("t1", TrialStarted())
            assert log.record("t1", restore_failure()).decision is Decision.RECOVER
        scratch = policy.replace(on_restore_exhausted=ExhaustionAction.RESTART_FROM_SCRATCH)
        replay = replay_experiment(store, "exp", policy=scratch, keep_steps=True)["t1"]
        assert replay.steps[-1].record.decision is Decision.RESTART_FROM_SCRATCH
        assert replay.state.checkpoints == ()

    # ------------------------------------------------------------ verify

    def test_verify_passes_on_a_recorded_log(self, store: EventStore) -> None:
        with ExperimentLog.open(store, "exp", POLICY, snapshot_every=2) as log:
            for i in range(3):
                start_with_checkpoint(log, f"t{i}")
        result = verify(store, "exp")
        assert result.ok and result.divergence is None and result.gaps == ()
        assert (result.trials, result.events) == (3, 15)
        assert result.snapshots_checked == 3

    def test_verify_reports_the_first_divergence(self, store: EventStore) -> None:
        with ExperimentLog.open(store, "exp", POLICY) as log:
            start_with_checkpoint(log, "t1")
        tampered = store.read_trial("exp", "t1")[-1]
        with store.engine.begin() as conn:
            conn.execute(
                update(events)
                .where(events.c.position == tampered.position)
                .values(decision="GIVE_UP")
            )
        result = verify(store, "exp")
        assert not result.ok
        d = result.divergence
        assert d is not None
        assert (d.position, d.trial_id, d.seq, d.field) == (tampered.position, "t1", 5, "decision")
        assert (d.recorded, d.replayed) == ("GIVE_UP", "RECOVER")
        assert "GIVE_UP" in d.describe()

    def test_verify_reports_seq_gaps(self, store: EventStore) -> None:
        with ExperimentLog.open(store, "exp", POLICY) as log:
            start_with_checkpoint(log, "t1")
        with store.engine.begin() as conn:
            conn.execute(delete(events).where(events.c.seq == 3))
        result = verify(store, "exp")
        assert not result.ok
        assert [(g.trial_id, g.after_seq, g.next_seq) for g in result.gaps] == [("t1", 2, 4)]


class TestSQLiteLog(LogContract):
    """On a SQLite file."""

    @pytest.fixture
    def url(self, sqlite_url: str) -> str:
        return sqlite_url


@pytest.mark.postgres
class TestPostgresLog(LogContract):
    """On PostgreSQL."""

    @pytest.fixture
    def url(self, pg_url: str) -> str:
        return pg_url
