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
from statemachine.log import EventStore, ExperimentLog
from statemachine.log.experiment_log import Prefolded
from statemachine.tune.recorder import Recorder


class HeldLog:
    """An experiment log whose writes wait until ``gate`` opens (a slow disk, held)."""

    def __init__(self, log: ExperimentLog, gate: threading.Event) -> None:
        self._log = log
        self._gate = gate
        self.transactions: list[int] = []
        """The size of every group write (one transaction each)."""

    def append_folded(self, items: list[Prefolded]) -> Any:
        self._gate.wait(timeout=10)
        self.transactions.append(len(items))
        return self._log.append_folded(items)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)


def stored_types(path: Path) -> list[str]:
    with EventStore.open(path, create=False) as store:
        if not store.list_experiments():
            return []
        return [e.type_name for e in store.read_experiment("exp")]


def stored_pairs(path: Path) -> list[tuple[str, str]]:
    with EventStore.open(path, create=False) as store:
        return [(e.trial_id, e.type_name) for e in store.read_experiment("exp")]


class HeldRecorder:
    """A background recorder whose log (a real SQLite file) is held until ``gate`` opens."""

    def __init__(self, tmp_path: Path, **options: Any) -> None:
        policy = RetryPolicy(max_failures=2)
        self.path = tmp_path / "log.db"
        self.gate = threading.Event()
        self.logs: list[HeldLog] = []

        def open_log() -> HeldLog:
            self.logs.append(HeldLog(ExperimentLog.open(self.path, "exp", policy), self.gate))
            return self.logs[-1]

        self.recorder = Recorder(open_log, policy, background=True, **options)
        assert self.recorder.open()


def test_a_decision_waits_for_the_queue_and_is_durable_when_record_returns(
    tmp_path: Path,
) -> None:
    held = HeldRecorder(tmp_path)
    recorder, path, gate = held.recorder, held.path, held.gate
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


def test_what_queued_behind_a_slow_disk_goes_to_the_log_in_one_transaction(
    tmp_path: Path,
) -> None:
    held = HeldRecorder(tmp_path)
    recorder = held.recorder
    trials = [f"t{i}" for i in range(20)]
    for trial in trials:
        recorder.record(trial, TrialAdded())
        recorder.record(trial, TrialStarted())
    held.gate.set()
    assert recorder.flush(force=True) == 0
    recorder.close()
    # 20 x (PolicySet, TrialAdded, TrialStarted), in the order recorded, in few transactions:
    # the writer thread may have taken the first events alone before the rest queued.
    assert stored_pairs(held.path) == [(t, kind) for t in trials
                                       for kind in ("PolicySet", "TrialAdded", "TrialStarted")]
    (log,) = held.logs
    assert sum(log.transactions) == 60 and len(log.transactions) <= 3, log.transactions
    assert recorder.summary()["recorded"] == 60


def test_a_group_write_with_an_unstorable_event_writes_the_others_in_order(
    tmp_path: Path,
) -> None:
    import os

    held = HeldRecorder(tmp_path, backoff_s=0.0)
    recorder = held.recorder
    bad = os.fsdecode(b"trial-\xff")  # a lone surrogate: no database can hold it
    for trial in ("a", bad, "b"):
        recorder.record(trial, TrialAdded())
    held.gate.set()
    assert recorder.flush(force=True) == 0  # nothing stays queued behind the bad events
    recorder.close()
    assert [(p.trial_id, p.event.type_name) for p, _ in recorder.dead] == [
        (bad, "PolicySet"), (bad, "TrialAdded"),
    ]
    assert recorder.write_failures == 0  # refused, not retried as if the store were down
    assert stored_pairs(held.path) == [("a", "PolicySet"), ("a", "TrialAdded"),
                                       ("b", "PolicySet"), ("b", "TrialAdded")]
