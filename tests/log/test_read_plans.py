"""The read model's listing queries can be answered from indexes on PostgreSQL: no
sequential scan of ``events`` for a listing, on a shared log of several experiments.

Every statement the read model runs for ``experiments``, ``trials --status``, a page of
trials, one trial, ``nodes`` and a live update is captured as it runs, then explained with
``enable_seqscan`` off: PostgreSQL still picks a ``Seq Scan on events`` when no index can
serve a query, so a plan without one proves an index path exists. (On a small table the
planner would rightly prefer a scan either way; which path it takes at scale depends on its
statistics.)
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import event, text

from statemachine import RestoreError, RetryPolicy, TrainingError
from statemachine.domain.events import (
    CheckpointSaved,
    RestoreSucceeded,
    TrialAdded,
    TrialFailed,
    TrialStarted,
)
from statemachine.log import EventStore, ExperimentLog
from statemachine.log.read import ReadModel


def _record(url: str, experiment: str, trials: int) -> None:
    policy = RetryPolicy(max_failures=-1, restore_retry_num=2)
    with ExperimentLog.open(url, experiment, policy) as log:
        for n in range(trials):
            t = f"t{n:04d}"
            log.record_many([(t, e) for e in (
                TrialAdded(), TrialStarted(), CheckpointSaved("c1"),
                TrialFailed(error=TrainingError("builtins.ValueError", "nan")), TrialStarted(),
                TrialFailed(error=RestoreError("builtins.OSError", "io")), TrialStarted(),
                RestoreSucceeded(),
            )])


def _listing_statements(url: str) -> list[tuple[str, Any]]:
    """Every SELECT on ``events`` the read model runs for the listings of a shared log."""
    for name, trials in (("big", 60), ("small1", 5), ("small2", 5)):
        _record(url, name, trials)
    with EventStore.open(url, create=False) as store:
        captured: list[tuple[str, Any]] = []

        def capture(conn: Any, cursor: Any, statement: str, parameters: Any,
                    context: Any, executemany: bool) -> None:
            if statement.lstrip().upper().startswith("SELECT"):
                captured.append((statement, parameters))

        event.listen(store.engine, "before_cursor_execute", capture)
        model = ReadModel(store)
        assert model.experiments()
        assert model.trials("big", status="ERROR").total == 0
        assert model.trials("big", sort="failures", limit=10).total == 60
        assert model.trial("big", "t0007").status == "RUNNING"
        assert model.nodes("big")
        assert model.changed_since("big", model.position("big") - 3).trials
        event.remove(store.engine, "before_cursor_execute", capture)
    listing = [(s, p) for s, p in captured if "events" in s]
    assert len(listing) >= 6
    return listing


def test_sqlite_listing_queries_never_scan_the_events_table(sqlite_url: str) -> None:
    """SQLite: each listing reads ``events`` through an index (a covering index scan for the
    grouped count of every experiment), never the table itself; ``nodes`` through the
    attempts' partial index."""
    listing = _listing_statements(sqlite_url)
    import sqlite3

    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as conn:
        plans = []
        for statement, parameters in listing:
            plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + statement,
                                                   parameters)]
            assert not any(line.strip() == "SCAN events" for line in plan), (statement, plan)
            plans.append(plan)
    assert any("ix_events_attempts" in line for plan in plans for line in plan), plans


@pytest.mark.postgres
def test_listing_queries_use_indexes_not_a_scan_of_events(pg_url: str) -> None:
    listing = _listing_statements(pg_url)
    with EventStore.open(pg_url, create=False) as store:
        with store.engine.connect() as conn:
            conn.execute(text("ANALYZE"))
            conn.execute(text("SET enable_seqscan = off"))
            for statement, parameters in listing:
                cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
                cursor.execute("EXPLAIN " + statement, parameters)
                plan = "\n".join(row[0] for row in cursor.fetchall())
                cursor.close()
                assert "Seq Scan on events" not in plan, f"{statement}\n{plan}"
                assert "Index" in plan, f"{statement}\n{plan}"
