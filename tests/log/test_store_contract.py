"""The event store's contract, run unchanged against a SQLite file and a PostgreSQL server.

``StoreContract`` holds every test; each backend subclass only says how to get a URL (the
pattern of pyeventsourcing's per-backend recorder tests).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import text, update

from statemachine import (
    CheckpointSaved,
    RestoreError,
    RetryPolicy,
    TrialAdded,
    TrialFailed,
    TrialStarted,
    apply,
)
from statemachine.domain.state import TrialState
from statemachine.exceptions import (
    ConcurrencyError,
    ConfigurationError,
    EventDecodeError,
    FencedError,
    StoreError,
    UnknownExperimentError,
    UnknownTrialError,
)
from statemachine.log import AppendRequest, EventStore
from statemachine.log.migrate import current_revision, head_revision
from statemachine.log.schema import events

POLICY = RetryPolicy(max_failures=2, restore_retry_num=1)
OTHER_POLICY = RetryPolicy(max_failures=5)


def _append_lifecycle(store: EventStore, session, trial_id: str) -> list:
    """Append added, started, checkpoint with their records; return the stored events."""
    state = TrialState(trial_id)
    out = []
    for event in (TrialAdded(config={"lr": 0.1}), TrialStarted(), CheckpointSaved("ckpt_1")):
        expected = state.seq
        record = apply(state, event, POLICY)
        out.append(store.append(session, trial_id, event, expected_seq=expected, record=record))
    return out


class StoreContract:
    """Every behaviour of :class:`EventStore`; subclasses provide the ``url`` fixture."""

    @pytest.fixture
    def url(self) -> str:
        raise NotImplementedError

    @pytest.fixture
    def store(self, url: str) -> Iterator[EventStore]:
        store = EventStore.open(url)
        yield store
        store.close()

    # ------------------------------------------------------------ opening

    def test_open_migrates_to_head_and_reopens(self, url: str) -> None:
        with EventStore.open(url) as store:
            assert current_revision(store.engine) == head_revision()
        with EventStore.open(url) as again:
            assert again.list_experiments() == []
        with EventStore.open(url, create=False) as reader:
            assert reader.list_experiments() == []

    def test_read_only_store_refuses_writes(self, url: str) -> None:
        EventStore.open(url).close()
        with (
            EventStore.open(url, create=False) as reader,
            pytest.raises(StoreError, match="read-only"),
        ):
            reader.start_session("exp", policy=POLICY)

    # ------------------------------------------------------------ sessions

    def test_sessions_take_increasing_epochs_and_are_listed(self, store: EventStore) -> None:
        first = store.start_session("exp", policy=POLICY, storage_path="/tmp/exp")
        second = store.start_session("exp", policy=OTHER_POLICY)
        assert (first.epoch, second.epoch) == (1, 2)
        store.end_session(second, clean=True)
        sessions = store.list_sessions("exp")
        assert [s.epoch for s in sessions] == [1, 2]
        assert sessions[0].policy == POLICY and sessions[1].policy == OTHER_POLICY
        assert sessions[0].ended_at is None and sessions[0].clean_end is None
        assert sessions[1].clean_end is True and sessions[1].ended_at is not None
        assert sessions[0].pid > 0 and sessions[0].host
        assert sessions[0].versions["statemachine"]
        [info] = store.list_experiments()
        assert (info.name, info.epoch, info.storage_path) == ("exp", 2, "/tmp/exp")

    # ------------------------------------------------------------ appending and reading

    def test_append_then_read_trial_round_trips_everything(self, store: EventStore) -> None:
        session = store.start_session("exp", policy=POLICY)
        stored = _append_lifecycle(store, session, "t1")
        read = store.read_trial("exp", "t1")
        assert read == stored
        assert [e.seq for e in read] == [1, 2, 3]
        assert [e.position for e in read] == sorted(e.position for e in read)
        assert read[0].event == TrialAdded(config={"lr": 0.1})
        assert read[2].event == CheckpointSaved("ckpt_1")
        assert (read[1].status_before, read[1].status_after) == ("PENDING", "RUNNING")
        assert read[1].counters == {
            "failures": 0, "restore_failures": 0, "total_restore_failures": 0, "preemptions": 0
        }  # fmt: skip
        assert all(e.epoch == 1 and e.experiment == "exp" for e in read)
        assert read[0].recorded_at.tzinfo is not None
        assert abs(read[0].recorded_at - datetime.now(timezone.utc)) < timedelta(minutes=1)

    def test_failure_row_records_error_type_and_decision(self, store: EventStore) -> None:
        session = store.start_session("exp", policy=POLICY)
        state = TrialState("t1")
        for event in (TrialAdded(), TrialStarted(restore_from="c")):
            store.append(
                session, "t1", event, expected_seq=state.seq, record=apply(state, event, POLICY)
            )
        failed = TrialFailed(error=RestoreError("builtins.OSError", "disk"))
        record = apply(state, failed, POLICY)
        row = store.append(session, "t1", failed, expected_seq=2, record=record)
        assert (row.error_type, row.decision, row.status_after) == (
            "RestoreError",
            "RETRY_RESTORE",
            "PENDING",
        )
        assert store.read_trial("exp", "t1")[-1].event == failed

    def test_append_without_record_stores_event_only(self, store: EventStore) -> None:
        session = store.start_session("exp", policy=POLICY)
        row = store.append(session, "t1", TrialAdded(), expected_seq=0)
        assert (row.status_before, row.decision, row.counters) == (None, None, None)
        assert store.read_trial("exp", "t1") == [row]

    def test_wrong_expected_seq_is_a_conflict_and_writes_nothing(self, store: EventStore) -> None:
        session = store.start_session("exp", policy=POLICY)
        _append_lifecycle(store, session, "t1")
        with pytest.raises(ConcurrencyError) as stale:
            store.append(session, "t1", TrialStarted(), expected_seq=2)
        assert (stale.value.expected_seq, stale.value.actual_seq) == (2, 3)
        with pytest.raises(ConcurrencyError) as gap:
            store.append(session, "t1", TrialStarted(), expected_seq=7)
        assert gap.value.actual_seq == 3
        with pytest.raises(ConcurrencyError):
            store.append(session, "new", TrialAdded(), expected_seq=1)
        assert [e.seq for e in store.read_trial("exp", "t1")] == [1, 2, 3]
        assert store.list_trials("exp") == ["t1"]

    def test_retried_append_with_same_event_id_is_idempotent(self, store: EventStore) -> None:
        session = store.start_session("exp", policy=POLICY)
        first = store.append(session, "t1", TrialAdded(), expected_seq=0, event_id="e-1")
        again = store.append(session, "t1", TrialAdded(), expected_seq=0, event_id="e-1")
        assert again == first
        assert len(store.read_trial("exp", "t1")) == 1

    def test_reused_event_id_for_another_event_is_refused(self, store: EventStore) -> None:
        session = store.start_session("exp", policy=POLICY)
        store.append(session, "t1", TrialAdded(), expected_seq=0, event_id="e-1")
        with pytest.raises(ConcurrencyError, match="already stored"):
            store.append(session, "t2", TrialAdded(), expected_seq=0, event_id="e-1")
        assert store.list_trials("exp") == ["t1"]

    def test_batch_is_atomic(self, store: EventStore) -> None:
        session = store.start_session("exp", policy=POLICY)
        good = [
            AppendRequest("a", TrialAdded(), 0),
            AppendRequest("b", TrialAdded(), 0),
            AppendRequest("a", TrialStarted(), 1),
        ]
        stored = store.append_batch(session, good)
        assert [(e.trial_id, e.seq) for e in stored] == [("a", 1), ("b", 1), ("a", 2)]
        assert stored == [*store.read_experiment("exp")]
        bad = [
            AppendRequest("c", TrialAdded(), 0),
            AppendRequest("a", CheckpointSaved("x"), 1),  # stale: a is at 2
        ]
        with pytest.raises(ConcurrencyError):
            store.append_batch(session, bad)
        assert store.list_trials("exp") == ["a", "b"]
        assert store.append_batch(session, []) == []

    def test_batch_without_returning_stores_the_same_and_checks_the_same(
        self, store: EventStore
    ) -> None:
        session = store.start_session("exp", policy=POLICY)
        store.append(session, "a", TrialAdded(), expected_seq=0)
        batch = [AppendRequest("b", TrialAdded(), 0), AppendRequest("a", TrialStarted(), 1)]
        assert store.append_batch(session, batch, returning=False) == []
        store.append(session, "b", TrialStarted(), expected_seq=1)
        stored = [*store.read_experiment("exp")]
        assert [(e.trial_id, e.seq, e.type_name) for e in stored] == [
            ("a", 1, "TrialAdded"), ("b", 1, "TrialAdded"), ("a", 2, "TrialStarted"),
            ("b", 2, "TrialStarted"),
        ]  # fmt: skip
        assert [e.position for e in stored] == sorted({e.position for e in stored})
        with pytest.raises(ConcurrencyError):
            store.append_batch(session, [AppendRequest("a", TrialStarted(), 1)], returning=False)
        newer = store.start_session("exp", policy=POLICY)
        with pytest.raises(FencedError):
            store.append_batch(session, [AppendRequest("c", TrialAdded(), 0)], returning=False)
        assert store.append_batch(newer, [AppendRequest("c", TrialAdded(), 0)])[0].seq == 1

    @pytest.mark.parametrize("returning", [True, False])
    def test_a_batch_with_the_times_of_its_source(
        self, store: EventStore, returning: bool
    ) -> None:
        """``trial-replay ingest`` gives each event Ray's time, not the commit's."""
        from statemachine.log import verify

        session = store.start_session("exp", policy=POLICY, kind="ingest")
        week_ago = datetime.now(timezone.utc) - timedelta(days=7)
        times = [week_ago, week_ago + timedelta(seconds=1.5), week_ago + timedelta(seconds=2)]
        batch = [AppendRequest("a", TrialAdded(), 0), AppendRequest("b", TrialAdded(), 0),
                 AppendRequest("a", TrialStarted(), 1)]
        returned = store.append_batch(session, batch, returning=returning, recorded_at=times)
        stored = [*store.read_experiment("exp")]
        assert [e.recorded_at for e in stored] == times
        assert returned == (stored if returning else [])
        with pytest.raises(ConfigurationError, match="3 events but 1 times"):
            store.append_batch(session, batch, recorded_at=times[:1])
        # Times before the session began are what an ingest session holds: verify accepts
        # them there, and only there.
        assert verify(store, "exp").ok
        fresh = store.start_session("exp2", policy=POLICY, kind="fresh")
        store.append_batch(fresh, batch[:2], recorded_at=times[:2])
        divergence = verify(store, "exp2").divergence
        assert divergence is not None and divergence.field == "recorded_at"

    @pytest.mark.parametrize("returning", [True, False])
    def test_a_batch_the_database_refuses_in_part_stores_nothing(
        self, store: EventStore, returning: bool
    ) -> None:
        # The checks pass; the database's unique index refuses the second row (its event id
        # is another event's). On PostgreSQL a batch without results is a COPY.
        session = store.start_session("exp", policy=POLICY)
        store.append(session, "a", TrialAdded(), expected_seq=0, event_id="e-1")
        clash = [
            AppendRequest("b", TrialAdded(), 0, event_id="e-2"),
            AppendRequest("c", TrialAdded(), 0, event_id="e-1"),
        ]
        with pytest.raises(ConcurrencyError, match="already stored"):
            store.append_batch(session, clash, returning=returning)
        assert store.list_trials("exp") == ["a"]
        again = [AppendRequest("b", TrialAdded(), 0, event_id="e-2"),
                 AppendRequest("b", TrialStarted(), 1, event_id="e-3")]  # fmt: skip
        store.append_batch(session, again, returning=returning)  # the store works on
        assert [(e.trial_id, e.event_id) for e in store.read_experiment("exp")] == [
            ("a", "e-1"), ("b", "e-2"), ("b", "e-3"),
        ]

    def test_a_new_session_waits_for_a_batch_whose_checks_passed(
        self, store: EventStore, url: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # Fencing: once a batch has checked the epoch it holds the experiment (PostgreSQL:
        # FOR SHARE; SQLite: the write lock) until it commits, so a newer driver's session
        # begins after it. A single append before the batch runs as its own statement
        # (autocommit on PostgreSQL): the batch must still be one transaction.
        session = store.start_session("exp", policy=POLICY)
        store.append(session, "a", TrialAdded(), expected_seq=0)
        with pytest.raises(ConcurrencyError):
            store.append(session, "a", TrialAdded(), expected_seq=0)
        newer: list[int] = []
        other = EventStore.open(url)
        checks = store._appends.checks  # white box: pause the batch between check and insert
        last_seqs = checks.last_seqs

        def paused(*args: object) -> dict[str, int]:
            found = last_seqs(*args)  # type: ignore[arg-type]
            taker = threading.Thread(
                target=lambda: newer.append(other.start_session("exp", policy=POLICY).epoch)
            )
            taker.start()
            taker.join(0.5)
            waited.append(taker.is_alive())
            takers.append(taker)
            return found

        waited: list[bool] = []
        takers: list[threading.Thread] = []
        monkeypatch.setattr(checks, "last_seqs", paused)
        try:
            batch = [AppendRequest("b", TrialAdded(), 0), AppendRequest("a", TrialStarted(), 1)]
            stored = store.append_batch(session, batch)
            for taker in takers:
                taker.join(30)
        finally:
            other.close()
        assert waited == [True], "the newer session did not wait for the batch in flight"
        assert newer == [2] and {e.epoch for e in stored} == {1}
        started = max(s.started_at for s in store.list_sessions("exp"))
        assert all(e.recorded_at <= started for e in store.read_experiment("exp"))

    def test_retried_batch_is_idempotent(self, store: EventStore) -> None:
        session = store.start_session("exp", policy=POLICY)
        batch = [
            AppendRequest("a", TrialAdded(), 0, event_id="x1"),
            AppendRequest("a", TrialStarted(), 1, event_id="x2"),
        ]
        first = store.append_batch(session, batch)
        assert store.append_batch(session, batch) == first
        assert len(store.read_trial("exp", "a")) == 2

    def test_batch_larger_than_the_bound_parameter_cap(self, store: EventStore) -> None:
        session = store.start_session("exp", policy=POLICY)
        many = [AppendRequest(f"t{i}", TrialAdded(), 0) for i in range(33_000)]  # > 32,766
        stored = store.append_batch(session, many)
        assert len({e.position for e in stored}) == 33_000
        assert len(store.list_trials("exp")) == 33_000
        states = [TrialState(f"t{i}", seq=1) for i in range(33_000)]
        assert store.save_snapshots(session, states) == 33_000

    # ------------------------------------------------------------ fencing

    def test_older_session_is_fenced_out(self, store: EventStore) -> None:
        old = store.start_session("exp", policy=POLICY)
        store.append(old, "t1", TrialAdded(), expected_seq=0)
        new = store.start_session("exp", policy=POLICY)
        with pytest.raises(FencedError) as fenced:
            store.append(old, "t1", TrialStarted(), expected_seq=1)
        assert (fenced.value.epoch, fenced.value.current_epoch) == (1, 2)
        with pytest.raises(FencedError):
            store.append_batch(old, [AppendRequest("t2", TrialAdded(), 0)])
        state = TrialState("t1", seq=1)
        with pytest.raises(FencedError):
            store.save_snapshots(old, [state])
        store.append(new, "t1", TrialStarted(), expected_seq=1)
        assert [e.epoch for e in store.read_trial("exp", "t1")] == [1, 2]

    def test_fenced_retry_of_an_acknowledged_append_is_still_idempotent(
        self, store: EventStore
    ) -> None:
        old = store.start_session("exp", policy=POLICY)
        first = store.append(old, "t1", TrialAdded(), expected_seq=0, event_id="k")
        store.start_session("exp", policy=POLICY)
        assert store.append(old, "t1", TrialAdded(), expected_seq=0, event_id="k") == first

    # ------------------------------------------------------------ reads

    def test_read_trial_up_to_seq_and_time(self, store: EventStore) -> None:
        session = store.start_session("exp", policy=POLICY)
        stored = _append_lifecycle(store, session, "t1")
        assert store.read_trial("exp", "t1", upto_seq=2) == stored[:2]
        assert store.read_trial("exp", "t1", upto_time=stored[1].recorded_at) == stored[:2]
        assert store.read_trial("exp", "t1", upto_time=stored[0].recorded_at - timedelta(1)) == []
        local = stored[2].recorded_at.astimezone(timezone(timedelta(hours=5)))
        assert store.read_trial("exp", "t1", upto_time=local) == stored

    def test_read_experiment_from_position_with_limit(self, store: EventStore) -> None:
        session = store.start_session("exp", policy=POLICY)
        other = store.start_session("other", policy=POLICY)
        a = _append_lifecycle(store, session, "a")
        _append_lifecycle(store, other, "z")
        b = _append_lifecycle(store, session, "b")
        everything = [*store.read_experiment("exp")]
        assert everything == a + b
        assert [*store.read_experiment("exp", from_position=a[1].position)] == a[2:] + b
        assert [*store.read_experiment("exp", limit=4)] == (a + b)[:4]
        assert [*store.read_experiment("exp", from_position=b[-1].position)] == []

    def test_read_trials_gives_each_trials_events_a_trial_at_a_time(
        self, store: EventStore
    ) -> None:
        session = store.start_session("exp", policy=POLICY)
        other = store.start_session("other", policy=POLICY)
        _append_lifecycle(store, other, "a")
        # 1,200 trials whose events interleave in the log: more than one chunk of trials
        names = [f"t{i:04d}" for i in range(1200)]
        store.append_batch(session, [AppendRequest(n, TrialAdded(), 0) for n in names])
        store.append_batch(session, [AppendRequest(n, TrialStarted(), 1) for n in names])
        read = list(store.read_trials("exp"))
        assert [trial for trial, _ in read] == names
        assert all(rows == store.read_trial("exp", trial) for trial, rows in read[::97])
        assert [len(rows) for _, rows in read] == [2] * 1200
        assert [t for t, _ in store.read_trials("exp", ["t0999", "t0001", "nope"])] == [
            "t0001", "t0999"]
        assert list(store.read_trials("exp", [])) == []

    def test_listing_experiments_and_trials(self, store: EventStore) -> None:
        session = store.start_session("exp", policy=POLICY)
        store.start_session("empty", policy=POLICY)
        _append_lifecycle(store, session, "t2")
        _append_lifecycle(store, session, "t1")
        infos = {i.name: i for i in store.list_experiments()}
        assert (infos["exp"].trials, infos["exp"].events) == (2, 6)
        assert (infos["empty"].trials, infos["empty"].events) == (0, 0)
        assert infos["empty"].last_recorded_at is None
        assert store.list_trials("exp") == ["t1", "t2"]
        assert store.list_trials("empty") == []

    def test_unknown_names_raise_with_suggestions(self, store: EventStore) -> None:
        session = store.start_session("my_experiment", policy=POLICY)
        _append_lifecycle(store, session, "trial_0001")
        with pytest.raises(UnknownExperimentError) as exp:
            store.read_trial("my_experimnt", "trial_0001")
        assert exp.value.suggestions == ["my_experiment"]
        with pytest.raises(UnknownTrialError) as trial:
            store.read_trial("my_experiment", "trial_001")
        assert trial.value.suggestions == ["trial_0001"]
        with pytest.raises(UnknownExperimentError):
            store.list_trials("nope")

    def test_corrupted_row_raises_decode_error_on_that_row_only(self, store: EventStore) -> None:
        session = store.start_session("exp", policy=POLICY)
        stored = _append_lifecycle(store, session, "t1")
        with store.engine.begin() as conn:
            conn.execute(
                update(events).where(events.c.position == stored[1].position).values(payload="{bad")
            )
        read = store.read_trial("exp", "t1")
        assert read[0].event == stored[0].event
        with pytest.raises(EventDecodeError, match="position"):
            _ = read[1].event
        with store.engine.begin() as conn:
            conn.execute(
                update(events).where(events.c.position == stored[2].position).values(counters="[1]")
            )
        with pytest.raises(EventDecodeError, match=r"counters .* not a JSON object"):
            _ = store.read_trial("exp", "t1")[2].counters

    # ------------------------------------------------------------ snapshots

    def test_snapshots_keep_the_newest_and_refuse_states_ahead_of_the_log(
        self, store: EventStore
    ) -> None:
        session = store.start_session("exp", policy=POLICY)
        _append_lifecycle(store, session, "t1")
        state2 = TrialState("t1", seq=2, checkpoints=("a",))
        state3 = TrialState("t1", seq=3, checkpoints=("a", "b"))
        assert store.save_snapshots(session, [state3]) == 1
        store.save_snapshots(session, [state2])  # older: ignored
        assert store.load_snapshots("exp") == {"t1": state3}
        with pytest.raises(StoreError, match="ahead"):
            store.save_snapshots(session, [TrialState("t1", seq=4)])
        assert [e.seq for e in store.read_tails("exp")] == []

    def test_read_tails_returns_events_after_each_snapshot(self, store: EventStore) -> None:
        session = store.start_session("exp", policy=POLICY)
        _append_lifecycle(store, session, "a")
        _append_lifecycle(store, session, "b")
        store.save_snapshots(session, [TrialState("a", seq=2)])
        assert [(e.trial_id, e.seq) for e in store.read_tails("exp")] == [
            ("a", 3), ("b", 1), ("b", 2), ("b", 3)
        ]  # fmt: skip

    def test_snapshot_of_another_machine_version_is_ignored(self, store: EventStore) -> None:
        session = store.start_session("exp", policy=POLICY)
        _append_lifecycle(store, session, "a")
        store.save_snapshots(session, [TrialState("a", seq=3)])
        with store.engine.begin() as conn:
            conn.execute(text("UPDATE snapshots SET machine_version = '0.0.0+old'"))
        assert store.load_snapshots("exp") == {}
        assert len([*store.read_tails("exp")]) == 3


class TestSQLiteStore(StoreContract):
    """The contract on a SQLite file."""

    @pytest.fixture
    def url(self, sqlite_url: str) -> str:
        return sqlite_url


@pytest.mark.postgres
class TestPostgresStore(StoreContract):
    """The contract on a real PostgreSQL server (a schema of its own)."""

    @pytest.fixture
    def url(self, pg_url: str) -> str:
        return pg_url
