"""The Tune recorder retries a store that is down, never a configuration that cannot work."""

from __future__ import annotations

import json
from pathlib import Path

from statemachine import RetryPolicy, TrialAdded, TrialStarted
from statemachine.log import ExperimentLog
from statemachine.tune.recorder import Recorder


def test_an_unsupported_database_is_refused_once_and_the_events_are_saved(
    tmp_path: Path,
) -> None:
    policy = RetryPolicy(max_failures=1)
    opened: list[str] = []

    def open_log() -> ExperimentLog:
        opened.append("open")
        return ExperimentLog.open("mysql+pymysql://user@127.0.0.1/exp", "exp", policy)

    recorder = Recorder(open_log, policy, backoff_s=0.0, cooldown_s=0.0)
    assert recorder.record("t1", TrialAdded()) is not None  # decisions never wait for the store
    record = recorder.record("t1", TrialStarted())
    assert record is not None and record.status_after.value == "RUNNING"
    for _ in range(3):
        assert recorder.flush(force=True) == 3  # PolicySet, TrialAdded, TrialStarted
    assert opened == ["open"]  # not retried as if the store were down
    assert recorder.refused is not None and "SQLite and PostgreSQL" in recorder.refused
    saved = recorder.save_unwritten(tmp_path / "unwritten.jsonl")
    assert saved is not None
    lines = [json.loads(line) for line in saved.read_text(encoding="utf-8").splitlines()]
    assert [line["type"] for line in lines] == ["PolicySet", "TrialAdded", "TrialStarted"]
    assert len({line["event_id"] for line in lines}) == 3


def test_a_store_that_is_down_is_retried(tmp_path: Path) -> None:
    policy = RetryPolicy(max_failures=1)
    target = tmp_path / "later" / "events.db"
    opened: list[str] = []

    def open_log() -> ExperimentLog:
        opened.append("open")
        # A read-only open of a file that is not there yet: a store that is not up yet.
        if not target.exists():
            from statemachine.log import EventStore

            EventStore.open(target, create=False)
        return ExperimentLog.open(target, "exp", policy)

    recorder = Recorder(open_log, policy, backoff_s=0.0, cooldown_s=0.0)
    recorder.record("t1", TrialAdded())
    assert recorder.flush(force=True) == 2
    target.parent.mkdir()
    ExperimentLog.open(target, "exp", policy).close()
    assert recorder.flush(force=True) == 0
    assert len(opened) == 3 and recorder.refused is None  # record, flush: failed; flush: open
    recorder.close()
