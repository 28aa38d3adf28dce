"""Property: the fast paths of issue 25 find exactly what the reference paths find, on random
logs damaged behind the log's back (a payload or counters that do not parse, a recorded
column changed, a time that does not read, a row deleted, a snapshot changed).

- ``verify`` (the compiled table, lean rows) equals ``verify --machine`` (the ``transitions``
  Machine itself) and the :class:`Verifier` fed one :class:`StoredEvent` at a time: the same
  result, the same first divergence and its words, the same gaps.
- ``replay_experiment`` without steps (rows folded as they are read) equals the replay with
  steps, trial for trial: the same state, the same halt and its reason, under the log's
  policies and under a what-if policy.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import create_engine, text

from statemachine import ExperimentLog, RetryPolicy
from statemachine.exceptions import StoreError
from statemachine.log import EventStore, Verifier, replay_experiment, verify
from statemachine.log.verification import session_spans
from tests.log.test_read_model_property import write
from tests.log.test_rehydration_property import policies, steps

#: How a row is damaged: the SQL that does it to the row at ``:p``.
DAMAGE = {
    "payload_garbage": "UPDATE events SET payload = '{not json' WHERE position = :p",
    "payload_list": "UPDATE events SET payload = '[1]' WHERE position = :p",
    "payload_field": "UPDATE events SET payload = '{\"nope\": 1}' WHERE position = :p",
    "counters_garbage": "UPDATE events SET counters = 'x' WHERE position = :p",
    "counters_changed": "UPDATE events SET counters = '{\"failures\": 7, \"preemptions\": 0, "
                        "\"restore_failures\": 0, \"total_restore_failures\": 0}' "
                        "WHERE position = :p",
    "status_after": "UPDATE events SET status_after = 'PAUSED' WHERE position = :p",
    "decision": "UPDATE events SET decision = 'STOP' WHERE position = :p",
    "error_type": "UPDATE events SET error_type = 'Nope' WHERE position = :p",
    "time_garbage": "UPDATE events SET recorded_at = 'garbage' WHERE position = :p",
    "time_back": "UPDATE events SET recorded_at = '2001-01-01 00:00:00' WHERE position = :p",
    "epoch_unknown": "UPDATE events SET epoch = 99 WHERE position = :p",
    "epoch_back": "UPDATE events SET epoch = epoch - 1 WHERE position = :p",
    "time_ahead": "UPDATE events SET recorded_at = '2999-01-01 00:00:00' WHERE position = :p",
    "delete": "DELETE FROM events WHERE position = :p",
    "snapshot": "UPDATE snapshots SET state = replace(state, :was, :now) WHERE trial_id = "
                "(SELECT trial_id FROM events WHERE position = :p)",
}
damages = st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(sorted(DAMAGE))),
                   max_size=3)


def _damage(url: str, damage: list[tuple[int, str]]) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        positions = list(conn.execute(text("SELECT position FROM events ORDER BY position"))
                         .scalars())
        for index, how in damage:
            if positions:
                conn.execute(text(DAMAGE[how]), {"p": positions[index % len(positions)],
                                                  "was": '"failures":', "now": '"failures":1'})
    engine.dispose()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy=policies, snapshot_every=st.integers(1, 6), script=steps, damage=damages,
       what_if=policies)
def test_fast_paths_find_what_the_reference_paths_find(
    policy: RetryPolicy, snapshot_every: int, script: list[tuple],
    damage: list[tuple[int, str]], what_if: RetryPolicy,
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'log.db'}"
        write(url, policy, snapshot_every, script, "exp")
        _damage(url, damage)
        with EventStore.open(url, create=False) as store:
            fast = verify(store, "exp")
            assert verify(store, "exp", machine=True) == fast
            reference = Verifier("exp", snapshots=store.load_snapshots("exp"),
                                 sessions=session_spans(store, "exp"), machine=True)
            for item in store.read_experiment("exp"):
                reference.feed(item)
            assert reference.result() == fast
            if fast.divergence is not None:
                assert fast.divergence.describe() == reference.result().divergence.describe()  # type: ignore[union-attr]
            for chosen in (None, what_if):
                lean = replay_experiment(store, "exp", policy=chosen)
                stepped = replay_experiment(store, "exp", policy=chosen, keep_steps=True)
                assert list(lean) == list(stepped)
                for trial_id, replay in lean.items():
                    other = stepped[trial_id]
                    assert (replay.state, replay.halted_at, replay.halt_reason) == (
                        other.state, other.halted_at, other.halt_reason)


def _two_session_log(url: str) -> None:
    """Three trials of 20 events (fail, restore retried, checkpoints), interleaved, over two
    driver sessions: rows of both epochs, times of both sessions, snapshots of each."""
    from benchmarks.log import POLICY, life

    lives = [life(f"t{n}", n) for n in range(3)]
    log = ExperimentLog.open(url, "exp", POLICY, snapshot_every=4, sqlite_synchronous="OFF")
    for i in range(10):
        for trial in lives[:2]:
            log.record(*trial[i])
    log.close(clean=True)
    log = ExperimentLog.open(url, "exp", POLICY, snapshot_every=4, sqlite_synchronous="OFF")
    for i in range(10, 19):
        log.record_many([trial[i] for trial in lives[:2]] + [lives[2][i - 10]])
    log.close(clean=False)


def test_every_damage_on_every_other_row_is_found_alike() -> None:
    # The property samples damage at random; this puts each kind on every other row of one
    # log (each event type, either session), so no path of the checks goes unvisited.
    with tempfile.TemporaryDirectory() as folder:
        pristine = Path(folder) / "pristine.db"
        _two_session_log(f"sqlite:///{pristine}")
        count = sqlite3.connect(pristine).execute("SELECT count(*) FROM events").fetchone()[0]
        found = set()
        for how in sorted(DAMAGE):
            for index in range(0, count, 2):
                copy = Path(folder) / "damaged.db"
                shutil.copyfile(pristine, copy)
                url = f"sqlite:///{copy}"
                _damage(url, [(index, how)])
                with EventStore.open(url, create=False) as store:
                    fast = verify(store, "exp")
                    assert verify(store, "exp", machine=True) == fast, (how, index)
                    reference = Verifier("exp", snapshots=store.load_snapshots("exp"),
                                         sessions=session_spans(store, "exp"))
                    for item in store.read_experiment("exp"):
                        reference.feed(item)
                    assert reference.result() == fast, (how, index)
                    if fast.divergence is not None:
                        found.add(fast.divergence.field)
                copy.unlink()
        # the damage was seen, in every way verify words it
        assert found >= {"event", "counters", "status_after", "decision", "error_type",
                         "recorded_at", "epoch", "snapshot"}, found


def test_a_driver_error_while_paging_rows_is_a_store_error_naming_the_read() -> None:
    # The rows come from the driver's cursor, not through SQLAlchemy: its errors must still
    # read as every other read's (a StoreError naming what was being done, exit 2 in the CLI).
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "log.db"
        _two_session_log(f"sqlite:///{path}")
        with sqlite3.connect(path) as conn:
            conn.execute("ALTER TABLE events RENAME COLUMN payload TO renamed")
        with EventStore.open(f"sqlite:///{path}", create=False) as store:
            with pytest.raises(StoreError, match=r"reading an experiment failed.*payload"):
                verify(store, "exp")
