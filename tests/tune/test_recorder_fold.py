"""The recorder's fold is the log's: an event is folded once, by the recorder, and the log
appends that fold; a fold the log cannot trust (a shadow begun without the log, another
session's policy) is folded again by the log, as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statemachine import (
    CheckpointSaved,
    RetryPolicy,
    TrainingError,
    TrialAdded,
    TrialFailed,
    TrialStarted,
    verify,
)
from statemachine.log import EventStore, ExperimentLog
from statemachine.tune.recorder import Recorder

POLICY = RetryPolicy(max_failures=2)


@pytest.fixture
def log_folds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The events the log folded itself (by type), counted as they happen."""
    folded: list[str] = []
    fold = ExperimentLog._fold

    def counting(self: ExperimentLog, trial_id: str, event: Any, *args: Any) -> Any:
        folded.append(event.type_name)
        return fold(self, trial_id, event, *args)

    monkeypatch.setattr(ExperimentLog, "_fold", counting)
    return folded


def _history() -> list[Any]:
    return [TrialAdded(), TrialStarted(), CheckpointSaved("c1"), CheckpointSaved("c2"),
            TrialFailed(TrainingError("builtins.ValueError", "nan")), TrialStarted()]


def test_each_event_is_folded_once(tmp_path: Path, log_folds: list[str]) -> None:
    path = tmp_path / "log.db"
    recorder = Recorder(lambda: ExperimentLog.open(path, "exp", POLICY), POLICY)
    assert recorder.open()
    for trial in ("t1", "t2"):
        for event in _history():
            assert recorder.record(trial, event) is not None
    assert recorder.flush(force=True) == 0
    # Every event (the PolicySet written before each trial's first one too) is appended as
    # the recorder folded it: the log folds none again.
    assert log_folds == []
    states = {t: recorder.state(t) for t in ("t1", "t2")}
    recorder.close()
    with EventStore.open(path) as store:
        assert verify(store, "exp").ok
        with ExperimentLog.open(store, "exp", POLICY) as log:
            assert log.states() == states


def test_a_state_the_log_did_not_hand_out_is_folded_again(
    tmp_path: Path, log_folds: list[str]
) -> None:
    # A driver restart: the trial's first events are in the log, the new recorder starts
    # from copies of the log's states. Its first event is folded again by the log (and found
    # equal), after which the log follows the recorder's fold.
    path = tmp_path / "log.db"
    history = _history()
    with ExperimentLog.open(path, "exp", POLICY) as log:
        log.record_many(("t1", e) for e in history[:3])
    log_folds.clear()
    recorder = Recorder(lambda: ExperimentLog.open(path, "exp", POLICY), POLICY)
    assert recorder.open()
    for event in history[3:]:
        recorder.record("t1", event)
    assert recorder.flush(force=True) == 0
    assert log_folds == ["CheckpointSaved"]
    state = recorder.state("t1")
    recorder.close()
    with EventStore.open(path) as store:
        assert verify(store, "exp").ok
        with ExperimentLog.open(store, "exp", POLICY) as log:
            assert log.state("t1") == state


def test_a_new_trial_folded_while_the_store_was_down_is_appended_as_folded(
    tmp_path: Path, log_folds: list[str]
) -> None:
    path = tmp_path / "log.db"
    down = [True]

    def open_log() -> ExperimentLog:
        if down[0]:
            raise OSError("the store is down")
        return ExperimentLog.open(path, "exp", POLICY)

    recorder = Recorder(open_log, POLICY, backoff_s=0.0, cooldown_s=0.0)
    for event in _history():
        recorder.record("t1", event)
    assert recorder.unwritten == 7
    down[0] = False
    assert recorder.flush(force=True) == 0
    assert log_folds == []  # a trial new to both: the recorder's fold is the log's
    recorder.close()
    with EventStore.open(path) as store:
        assert verify(store, "exp").ok


def test_another_sessions_policy_is_folded_again(tmp_path: Path, log_folds: list[str]) -> None:
    path = tmp_path / "log.db"
    other = RetryPolicy(max_failures=5)
    recorder = Recorder(lambda: ExperimentLog.open(path, "exp", other), POLICY)
    assert recorder.open()
    for event in _history()[:3]:
        recorder.record("t1", event)
    assert recorder.flush(force=True) == 0
    assert log_folds == ["PolicySet", "TrialAdded", "TrialStarted", "CheckpointSaved"]
    recorder.close()
    with EventStore.open(path) as store:
        stored = [e.event for e in store.read_trial("exp", "t1")]
    # as the log's own session writes them: its policy is in force for the trial's events
    assert [e.type_name for e in stored][:3] == ["PolicySet", "PolicySet", "TrialAdded"]
    assert stored[1].policy == other  # type: ignore[attr-defined]
