"""A moved or renamed experiment continues its history under the new name (issue 15).

``ExperimentLog.open(..., continue_trials=...)`` on a store that has no experiment of the new
name but another holding every given trial renames it: events, sessions, snapshots and
counters follow. On SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from statemachine.domain.events import TrialAdded, TrialFailed, TrialStarted
from statemachine.domain.failures import TrainingError
from statemachine.domain.policy import RetryPolicy
from statemachine.exceptions import ExperimentExistsError
from statemachine.log import EventStore, ExperimentLog, verify

POLICY = RetryPolicy(max_failures=5)
BOOM = TrialFailed(error=TrainingError("builtins.ValueError", "boom"))


def record_failures(store: EventStore, experiment: str, trials: dict[str, int]) -> None:
    with ExperimentLog.open(store, experiment, POLICY, storage_path=f"/r/{experiment}") as log:
        for trial_id, failures in trials.items():
            log.record(trial_id, TrialAdded())
            for _ in range(failures):
                log.record(trial_id, TrialStarted())
                log.record(trial_id, BOOM)


class RenameContract:
    @pytest.fixture
    def url(self) -> str:
        raise NotImplementedError

    @pytest.fixture
    def store(self, url: str) -> Iterator[EventStore]:
        store = EventStore.open(url)
        yield store
        store.close()

    def test_the_experiment_continues_under_its_new_name(self, store: EventStore) -> None:
        record_failures(store, "exp-a", {"t1": 2, "t2": 1})
        record_failures(store, "other", {"t9": 1})
        log = ExperimentLog.open(store, "exp-b", POLICY, storage_path="/moved/exp-b",
                                 continue_trials=["t1", "t2"])
        try:
            assert log.renamed_from == ("exp-a", "/r/exp-a")
            assert {t: s.failures for t, s in log.states().items()} == {"t1": 2, "t2": 1}
            assert log.session.epoch == 2  # the old experiment's sessions came along
        finally:
            log.close()
        assert sorted(i.name for i in store.list_experiments()) == ["exp-b", "other"]
        assert verify(store, "exp-b").ok
        assert [s.epoch for s in store.list_sessions("exp-b")] == [1, 2]

    def test_nothing_is_renamed_without_every_trial(self, store: EventStore) -> None:
        record_failures(store, "exp-a", {"t1": 1})
        with ExperimentLog.open(store, "exp-b", POLICY, continue_trials=["t1", "t7"]) as log:
            assert log.renamed_from is None
            assert log.states() == {}
        assert sorted(i.name for i in store.list_experiments()) == ["exp-a", "exp-b"]

    def test_an_existing_name_is_never_taken_over(self, store: EventStore) -> None:
        record_failures(store, "exp-a", {"t1": 1})
        record_failures(store, "exp-b", {"t5": 1})
        with ExperimentLog.open(store, "exp-b", POLICY, continue_trials=["t1"]) as log:
            assert log.renamed_from is None
            assert set(log.states()) == {"t5"}
        with pytest.raises(ExperimentExistsError, match="already has an experiment 'exp-b'"):
            store.rename_experiment("exp-a", "exp-b")

    def test_the_store_finds_the_experiment_holding_the_trials(self, store: EventStore) -> None:
        record_failures(store, "exp-a", {"t1": 1, "t2": 0})
        record_failures(store, "exp-c", {"t1": 1})
        assert store.find_experiment_with_trials(["t1", "t2"], other_than="x") == "exp-a"
        assert store.find_experiment_with_trials(["t1"], other_than="exp-a") == "exp-c"
        assert store.find_experiment_with_trials(["nope"], other_than="x") is None
        assert store.find_experiment_with_trials([], other_than="x") is None


class TestSQLiteRename(RenameContract):
    @pytest.fixture
    def url(self, sqlite_url: str) -> str:
        return sqlite_url


@pytest.mark.postgres
class TestPostgresRename(RenameContract):
    @pytest.fixture
    def url(self, pg_url: str) -> str:
        return pg_url
