"""The cyclic collector is paused only inside a bulk decode, and always restored after it."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from statemachine import EventStore, ExperimentLog, RetryPolicy
from statemachine.domain.events import TrialAdded, TrialStarted
from statemachine.log import rehydrate, replay_experiment
from statemachine.log.bulk import collector_paused


@pytest.fixture
def collector_on() -> Iterator[None]:
    was_on = gc.isenabled()
    gc.enable()
    try:
        yield
    finally:
        (gc.enable if was_on else gc.disable)()


def test_paused_inside_and_restored_after_even_on_error(collector_on: None) -> None:
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_a_collector_the_caller_turned_off_stays_off(collector_on: None) -> None:
    gc.disable()
    with collector_paused(), collector_paused():
        pass
    assert not gc.isenabled()


def test_opening_and_replaying_leave_the_collector_on(tmp_path: Path, collector_on: None) -> None:
    url = f"sqlite:///{tmp_path / 'log.db'}"
    log = ExperimentLog.open(url, "exp", RetryPolicy())
    log.record("t1", TrialAdded())
    log.record("t1", TrialStarted())
    log.close()
    with EventStore.open(url, create=False) as store:
        assert set(rehydrate(store, "exp")) == {"t1"}
        assert gc.isenabled()
        assert set(replay_experiment(store, "exp")) == {"t1"}
        assert gc.isenabled()
    ExperimentLog.open(url, "exp", RetryPolicy()).close()
    assert gc.isenabled()
