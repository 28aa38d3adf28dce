"""Replay and verify read a history from any source (:mod:`statemachine.log.history`): a plain
list of stored rows gives the same folds and the same verdict as the store it was read from,
and a row changed in the list is found by verify just as in a store."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterator, Sequence
from datetime import datetime
from pathlib import Path

from statemachine import (
    CheckpointSaved,
    RetryPolicy,
    TrainingError,
    TrialAdded,
    TrialFailed,
    TrialStarted,
)
from statemachine.domain.state import TrialState
from statemachine.log import EventStore, ExperimentLog, SnapshotLoad, StoredEvent, verify
from statemachine.log.history import ReplayHistory, SnapshotHistory, VerifiableHistory
from statemachine.log.records import FoldRow, SessionInfo
from statemachine.log.replay import rehydrate, replay_experiment, replay_trial


class ListHistory:
    """An experiment's history held in memory: rows, snapshots and sessions (no SQL)."""

    def __init__(self, rows: list[StoredEvent], snapshots: dict[str, TrialState],
                 sessions: list[SessionInfo]) -> None:
        self.rows, self.snapshots, self.sessions = rows, snapshots, sessions

    def read_experiment(self, experiment: str, *, from_position: int = 0,
                        limit: int | None = None,
                        upto_time: datetime | None = None) -> Iterator[StoredEvent]:
        found = [r for r in self.rows if r.position > from_position
                 and (upto_time is None or r.recorded_at <= upto_time)]
        return iter(found[:limit] if limit is not None else found)

    def read_trial(self, experiment: str, trial_id: str, *, upto_seq: int | None = None,
                   upto_time: datetime | None = None) -> Sequence[StoredEvent]:
        return [r for r in self.read_experiment(experiment, upto_time=upto_time)
                if r.trial_id == trial_id and (upto_seq is None or r.seq <= upto_seq)]

    def read_fold_rows(self, experiment: str, *, upto_position: int | None = None,
                       upto_time: datetime | None = None) -> Iterator[FoldRow]:
        for r in self.read_experiment(experiment, upto_time=upto_time):
            if upto_position is None or r.position <= upto_position:
                yield (r.position, r.trial_id, r.seq, r.type_name, r.version, r.payload_json,
                       r.counters_json)

    def load_snapshots(self, experiment: str) -> dict[str, TrialState]:
        return {k: v.copy() for k, v in self.snapshots.items()}

    def load_snapshot_set(self, experiment: str) -> SnapshotLoad:
        return SnapshotLoad(self.load_snapshots(experiment))

    def read_tails(self, experiment: str, *,
                   refold: Collection[str] = ()) -> Iterator[StoredEvent]:
        rows = sorted(self.rows, key=lambda r: (r.trial_id, r.seq))
        for r in rows:
            snapshot = self.snapshots.get(r.trial_id)
            if snapshot is None or r.trial_id in refold or r.seq > snapshot.seq:
                yield r

    def list_sessions(self, experiment: str) -> list[SessionInfo]:
        return self.sessions


def _history(tmp_path: Path) -> tuple[str, ListHistory]:
    url = f"sqlite:///{tmp_path / 'log.db'}"
    with ExperimentLog.open(url, "exp", RetryPolicy(max_failures=1)) as log:
        for trial in ("t1", "t2"):
            log.record(trial, TrialAdded(config={"lr": 0.1}))
            log.record(trial, TrialStarted())
            log.record(trial, CheckpointSaved("ckpt_1"))
        log.record("t1", TrialFailed(error=TrainingError("builtins.ValueError", "nan")))
    with ExperimentLog.open(url, "exp", RetryPolicy(max_failures=1)) as log:
        log.record("t2", TrialFailed(error=TrainingError("builtins.ValueError", "nan")))
        log.record("t2", TrialStarted())
    with EventStore.open(url, create=False) as store:
        history = ListHistory(list(store.read_experiment("exp")), store.load_snapshots("exp"),
                              store.list_sessions("exp"))
    assert history.snapshots and len(history.sessions) == 2
    return url, history


def test_a_list_of_rows_replays_and_verifies_as_its_store_does(tmp_path: Path) -> None:
    url, history = _history(tmp_path)
    sources: tuple[ReplayHistory, SnapshotHistory, VerifiableHistory] = (
        history, history, history)  # mypy: the list satisfies each protocol
    assert sources
    with EventStore.open(url, create=False) as store:
        for keep_steps in (False, True):
            assert replay_experiment(history, "exp", keep_steps=keep_steps) \
                == replay_experiment(store, "exp", keep_steps=keep_steps)
        assert replay_trial(history, "exp", "t2", upto_seq=4) \
            == replay_trial(store, "exp", "t2", upto_seq=4)
        assert rehydrate(history, "exp") == rehydrate(store, "exp")
        assert verify(history, "exp") == verify(store, "exp")
    assert verify(history, "exp").ok and verify(history, "exp").events == len(history.rows)


def test_verify_finds_a_changed_row_in_a_list(tmp_path: Path) -> None:
    _, history = _history(tmp_path)
    index = next(i for i, r in enumerate(history.rows) if r.decision is not None)
    changed = history.rows[index]
    history.rows[index] = dataclasses.replace(changed, decision="STOP")
    result = verify(history, "exp")
    assert not result.ok and result.divergence is not None
    assert (result.divergence.position, result.divergence.field) == (changed.position, "decision")
    history.rows[index] = dataclasses.replace(changed, epoch=7)
    assert verify(history, "exp").divergence.field == "epoch"  # type: ignore[union-attr]
