"""When a snapshot is trusted: only when the fold that wrote it is the fold that would run now.

And a snapshot that cannot be used (it does not decode) is a cache miss, never an error: the
driver opens the log, folds that trial from its events, and says so once.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
import pickle
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update
from transitions import Machine

from statemachine import CheckpointSaved, RetryPolicy, TrialAdded, TrialStarted
from statemachine.domain import machine as machine_module
from statemachine.domain.compiled import TABLE, compile_machine
from statemachine.domain.machine import build_machine, restore_retry_left, transition_table
from statemachine.domain.state import CHECKPOINT_HISTORY, Counters, TrialState
from statemachine.domain.status import Status
from statemachine.log import EventStore, ExperimentLog, replay_experiment, verify
from statemachine.log.schema import snapshots
from statemachine.log.snapshot import fingerprint, machine_version

REPO = Path(__file__).resolve().parents[2]


def _machine_with(replace: dict[str, Any]) -> dict[Any, Any]:
    """The live transition table with some guards or effects swapped (by name)."""

    def swap(funcs: Any) -> Any:
        return [replace.get(f.__name__, f) for f in funcs] if isinstance(funcs, list) else funcs

    table = [
        {k: swap(v) if k in ("conditions", "before") else v for k, v in spec.items()}
        for spec in transition_table()
    ]
    return compile_machine(
        Machine(model=None, states=Status, initial=Status.NEW, transitions=table,
                auto_transitions=False, send_event=True, ignore_invalid_triggers=False,
                model_attribute="status")
    )  # fmt: skip


def test_the_fingerprint_is_the_same_for_the_same_machine() -> None:
    assert fingerprint() == fingerprint(TABLE) == fingerprint(compile_machine(build_machine()))
    assert fingerprint(_machine_with({})) == fingerprint()
    assert machine_version().endswith("+" + fingerprint())


def test_the_fingerprint_does_not_change_as_the_process_runs(sqlite_url: str) -> None:
    # Folding and decoding fill module-level caches (decoded policies, decoders), and the
    # first pickle or copy of a slots class caches its __slotnames__ (Ray pickles policies
    # and states): data Python adds while the process runs, not code.
    before = fingerprint()
    _record_with_snapshots(sqlite_url)
    with ExperimentLog.open(sqlite_url, "exp", RetryPolicy(max_failures=3)) as log:
        assert log.states()
    for value in (RetryPolicy(max_failures=2), TrialState("t"), Counters(1, 2, 3, 4)):
        assert pickle.loads(pickle.dumps(value)) == value == copy.copy(value)
    assert fingerprint() == before == machine_version().rsplit("+", 1)[1]


def test_the_fingerprint_does_not_depend_on_the_hash_seed() -> None:
    code = "from statemachine.log.snapshot import machine_version; print(machine_version())"
    seen = {
        subprocess.run(
            [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout.strip()
        for seed in ("1", "2", "3")
    }  # fmt: skip
    assert seen == {machine_version()}


def test_a_changed_guard_body_changes_the_fingerprint() -> None:
    # Same name, same place in the table: only the body differs (<= instead of <).
    def restore_retry_left(ed: Any) -> bool:
        return bool(ed.model.restore_failures <= ed.kwargs["policy"].restore_retry_num)

    assert fingerprint(_machine_with({"restore_retry_left": restore_retry_left})) != fingerprint()


def test_a_changed_helper_of_a_guard_changes_the_fingerprint() -> None:
    # The guard's own code is unchanged; the helper it calls (_state) is another one.
    def _state(ed: Any) -> Any:
        return ed.model.copy()

    guard = types.FunctionType(
        restore_retry_left.__code__,
        {**machine_module.__dict__, "_state": _state},
        "restore_retry_left",
    )
    assert fingerprint(_machine_with({"restore_retry_left": guard})) != fingerprint()


def test_a_changed_effect_changes_the_fingerprint() -> None:
    def count_failure(ed: Any) -> None:
        ed.model.failures += 2

    assert fingerprint(_machine_with({"count_failure": count_failure})) != fingerprint()


def test_the_state_fields_and_checkpoint_history_are_in_the_fingerprint() -> None:
    @dataclasses.dataclass(slots=True)
    class WiderState(TrialState):
        extra: int = 0

    assert fingerprint(state_type=WiderState) != fingerprint()
    assert fingerprint(history=CHECKPOINT_HISTORY + 1) != fingerprint()


# ------------------------------------------------------------ unusable snapshots


def _record_with_snapshots(url: str) -> dict[str, TrialState]:
    with ExperimentLog.open(url, "exp", RetryPolicy(max_failures=1), snapshot_every=2) as log:
        for trial in ("t1", "t2", "t3"):
            log.record(trial, TrialAdded())
            log.record(trial, TrialStarted())
            log.record(trial, CheckpointSaved("c1"))
        return log.states()


@pytest.mark.parametrize("broken", ['{"trial_id": "t2", "status": "RUN', '{"status": "NOPE"}'])
def test_a_snapshot_that_does_not_decode_is_ignored_with_one_warning(
    sqlite_url: str, caplog: pytest.LogCaptureFixture, broken: str
) -> None:
    expected = _record_with_snapshots(sqlite_url)
    with EventStore.open(sqlite_url) as store:
        with store.engine.begin() as conn:
            conn.execute(
                update(snapshots).where(snapshots.c.trial_id.in_(["t1", "t2"])).values(state=broken)
            )
        with caplog.at_level(logging.WARNING, logger="statemachine"):
            log = ExperimentLog.open(store, "exp", RetryPolicy(max_failures=1))
        warnings = [r for r in caplog.records if "do not decode" in r.getMessage()]
        assert len(warnings) == 1
        assert "2 snapshot(s)" in warnings[0].getMessage()
        assert log.states() == expected
        assert expected == {t: r.state for t, r in replay_experiment(store, "exp").items()}
        log.record("t2", CheckpointSaved("c2"))
        log.close()  # a clean close writes good snapshots over the broken ones
        assert set(store.load_snapshots("exp")) == {"t1", "t2", "t3"}
        assert verify(store, "exp").ok


@pytest.mark.postgres
def test_a_snapshot_that_does_not_decode_is_ignored_on_postgres(pg_url: str) -> None:
    expected = _record_with_snapshots(pg_url)
    with EventStore.open(pg_url) as store:
        with store.engine.begin() as conn:
            conn.execute(update(snapshots).where(snapshots.c.trial_id == "t3").values(state="["))
        loaded = store.load_snapshot_set("exp")
        assert loaded.unusable == {"t3"} and set(loaded.states) == {"t1", "t2"}
        tails = [(e.trial_id, e.seq) for e in store.read_tails("exp", refold=loaded.unusable)]
        assert tails == [(e.trial_id, e.seq) for e in store.read_trial("exp", "t3")]
        assert tails[0] == ("t3", 1)
        with ExperimentLog.open(store, "exp", RetryPolicy(max_failures=1)) as log:
            assert log.states() == expected
