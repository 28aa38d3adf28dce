"""A log written before the read model (revision 0003) upgrades to 0004 with its summaries
filled in from the stored states, and then reads as a full fold says; a state that did not
decode is left without a summary and its trial is folded from its events."""

from __future__ import annotations

from collections import Counter

from alembic import command
from sqlalchemy import create_engine, inspect, text

from statemachine import RestoreError, RetryPolicy, TrainingError
from statemachine.cli import main
from statemachine.domain.events import (
    CheckpointSaved,
    RestoreSucceeded,
    TrialAdded,
    TrialFailed,
    TrialStarted,
)
from statemachine.log import EventStore, ExperimentLog, replay_experiment
from statemachine.log.migrate import alembic_config
from statemachine.log.read import STATUSES, ReadModel, TrialSummary


def test_a_log_at_revision_0003_upgrades_and_reads_through_the_read_model(
    sqlite_url: str,
) -> None:
    policy = RetryPolicy(max_failures=1, restore_retry_num=1)
    with ExperimentLog.open(sqlite_url, "old", policy) as log:
        for n in range(6):
            t = f"t{n}"
            log.record_many([(t, e) for e in (
                TrialAdded(), TrialStarted(), CheckpointSaved("c1"),
                TrialFailed(error=TrainingError("builtins.ValueError", "nan")), TrialStarted(),
                TrialFailed(error=RestoreError("builtins.OSError", "io")),
            )][: 3 + n % 4])
        log.record_many([("t1", TrialStarted()), ("t1", RestoreSucceeded())])
    engine = create_engine(sqlite_url)
    with engine.begin() as conn:  # the log as revision 0003 left it, one state unreadable
        command.downgrade(alembic_config(conn), "0003")
        conn.execute(text("UPDATE snapshots SET state = '{not json' WHERE trial_id = 't2'"))
    assert "status" not in {c["name"] for c in inspect(engine).get_columns("snapshots")}
    engine.dispose()

    assert main(["--db", sqlite_url, "db", "upgrade"]) == 0
    engine = create_engine(sqlite_url)
    with engine.connect() as conn:
        rows = dict(conn.execute(text("SELECT trial_id, status FROM snapshots")).all())
    engine.dispose()
    assert rows["t2"] is None and all(v is not None for t, v in rows.items() if t != "t2")
    with EventStore.open(sqlite_url, create=False) as store:
        states = [r.state for r in replay_experiment(store, "old").values()]
        model = ReadModel(store)
        expected = [TrialSummary.of("old", s) for s in states]
        got = [t for t in model.trials("old").items]
        assert [t.trial_id for t in got] == [t.trial_id for t in expected]
        assert [(t.status, t.num_failures, t.total_restore_failures, t.last_error_type)
                for t in got] == [(t.status, t.num_failures, t.total_restore_failures,
                                   t.last_error_type) for t in expected]
        counts = Counter(t.status for t in expected)
        assert model.status_counts("old") == {s: counts.get(s, 0) for s in STATUSES}
