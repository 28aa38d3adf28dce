"""``ReadModel.failed_first`` (the trials ``timeline`` draws first): the trials with a recorded
failure, in the order of their first failure, whatever came after it, on SQLite and
PostgreSQL."""

from __future__ import annotations

import pytest

from statemachine import RetryPolicy
from statemachine.domain.events import TrialAdded, TrialCompleted, TrialFailed, TrialStarted
from statemachine.domain.failures import RestoreError, TrainingError
from statemachine.log import EventStore, ExperimentLog
from statemachine.log.read import ReadModel

POLICY = RetryPolicy(max_failures=-1, restore_retry_num=3)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))


def test_the_trials_that_failed_in_the_order_of_their_first_failure(url: str) -> None:
    boom = TrainingError("ValueError", "boom")
    with ExperimentLog.open(url, "exp", POLICY) as log:
        # "a" is added first but fails last; "d" never fails; "b" fails twice, then completes
        for trial in "abcd":
            log.record_many([(trial, TrialAdded()), (trial, TrialStarted())])
        log.record("c", TrialFailed(error=boom))
        log.record("b", TrialFailed(error=RestoreError("OSError", "gone")))
        log.record_many([("b", TrialStarted()), ("b", TrialFailed(error=boom)),
                         ("b", TrialStarted()), ("b", TrialCompleted())])
        log.record("a", TrialFailed(error=boom))
        log.record("d", TrialCompleted())
    with ExperimentLog.open(url, "other", POLICY) as other:  # another experiment's failures
        other.record_many([("z", TrialAdded()), ("z", TrialStarted()),
                           ("z", TrialFailed(error=boom))])
    with EventStore.open(url, create=False) as store:
        model = ReadModel(store)
        assert model.failed_first("exp") == ["c", "b", "a"]
        assert model.failed_first("exp", limit=2) == ["c", "b"]
        assert model.failed_first("other") == ["z"]
