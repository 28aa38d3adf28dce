"""When a snapshot is trusted: only when it was written by the machine revision that runs now.

And a snapshot that cannot be used (it does not decode) is a cache miss, never an error: the
driver opens the log, folds that trial from its events, and says so once.
"""

from __future__ import annotations

import logging

import pytest
from sqlalchemy import select, update

from statemachine import CheckpointSaved, RetryPolicy, TrialAdded, TrialStarted
from statemachine.domain.machine import MACHINE_REVISION
from statemachine.domain.state import TrialState
from statemachine.log import EventStore, ExperimentLog, replay_experiment, verify
from statemachine.log.schema import snapshots
from statemachine.log.snapshot import machine_version


def test_snapshots_are_tagged_with_the_machine_revision(sqlite_url: str) -> None:
    # The tag is the explicit revision, the same under any Python and hash seed; a snapshot
    # of another revision is a cache miss (tests/log/test_store_contract.py), and the
    # revision goes up with the machine (tests/domain/test_domain_machine_revision.py).
    assert machine_version() == f"rev{MACHINE_REVISION}"
    _record_with_snapshots(sqlite_url)
    with EventStore.open(sqlite_url) as store, store.engine.connect() as conn:
        tags = set(conn.execute(select(snapshots.c.machine_version)).scalars())
    assert tags == {machine_version()}


def test_a_snapshot_of_an_older_revision_is_refolded(sqlite_url: str) -> None:
    expected = _record_with_snapshots(sqlite_url)
    with EventStore.open(sqlite_url) as store:
        with store.engine.begin() as conn:
            conn.execute(update(snapshots).values(machine_version=f"rev{MACHINE_REVISION - 1}"))
        loaded = store.load_snapshot_set("exp")
        assert loaded.states == {}
        with ExperimentLog.open(store, "exp", RetryPolicy(max_failures=1)) as log:
            assert log.states() == expected


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
