"""The recorder's background writer: events without a decision never hold up the caller, a
decision is durable (with everything before it) when ``record`` returns."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from statemachine import (
    CheckpointSaved,
    Decision,
    RetryPolicy,
    TrainingError,
    TrialAdded,
    TrialFailed,
    TrialStarted,
)
from statemachine.domain.events import Event
from statemachine.log import EventStore, ExperimentLog
from statemachine.tune.recorder import Recorder


class HeldLog:
    """An experiment log whose writes wait until ``gate`` opens (a slow disk, held)."""

    def __init__(self, log: ExperimentLog, gate: threading.Event) -> None:
        self._log = log
        self._gate = gate

    def record(self, trial_id: str, event: Event, *, event_id: str | None = None) -> Any:
        self._gate.wait(timeout=10)
        return self._log.record(trial_id, event, event_id=event_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)


def stored_types(path: Path) -> list[str]:
    with EventStore.open(path, create=False) as store:
        if not store.list_experiments():
            return []
        return [e.type_name for e in store.read_experiment("exp")]


def test_a_decision_waits_for_the_queue_and_is_durable_when_record_returns(
    tmp_path: Path,
) -> None:
    policy = RetryPolicy(max_failures=2)
    path = tmp_path / "log.db"
    gate = threading.Event()
    recorder = Recorder(
        lambda: HeldLog(ExperimentLog.open(path, "exp", policy), gate), policy, background=True
    )
    assert recorder.open()
    for event in (TrialAdded(), TrialStarted(), CheckpointSaved("c1"), CheckpointSaved("c2")):
        record = recorder.record("t1", event)
        assert record is not None and record.decision is None
    # The log is held: a synchronous recorder would have written (or still be waiting).
    assert stored_types(path) == []
    assert recorder.unwritten >= 4
    gate.set()
    failed = recorder.record("t1", TrialFailed(error=TrainingError("builtins.ValueError", "nan")))
    assert failed is not None and failed.decision is Decision.RECOVER
    # Durable before the caller (Ray) can act on the decision, in the order recorded.
    assert stored_types(path) == [
        "PolicySet", "TrialAdded", "TrialStarted", "CheckpointSaved", "CheckpointSaved",
        "TrialFailed",
    ]  # fmt: skip
    assert recorder.unwritten == 0
    recorder.record("t1", TrialStarted(restore_from="c2"))
    assert recorder.flush(force=True) == 0
    recorder.close()
    assert stored_types(path)[-1] == "TrialStarted"
    assert recorder.summary() == {"recorded": 7, "unwritten": 0, "write_failures": 0,
                                  "rejected": 0}
