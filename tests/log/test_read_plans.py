"""The read model's listing queries can be answered from indexes on PostgreSQL: no
sequential scan of ``events`` for a listing, on a shared log of several experiments.

Every statement the read model runs for ``experiments``, ``trials --status``, a page of
trials, one trial, ``nodes`` and a live update is captured as it runs, then explained with
PostgreSQL's own choice (sequential scans allowed) after ``ANALYZE`` of a log of a few
thousand events: a statement that groups or filters over every event of an experiment gets a
``Seq Scan`` (or a ``Bitmap Heap Scan`` of the experiment's rows) there, as it did on the 2.18M
event log of issue 25; statements shaped as index probes (each trial's head
from ``ix_events_firsts``: :mod:`statemachine.log.heads`) get index scans at any size.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from sqlalchemy import create_engine, event, text

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

#: Trials of the big experiment: 8 events each, enough rows that the planner scans the table
#: for a query that reads every event (checked against the grouped query this replaced).
BIG = 400


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
    for name, trials in (("big", BIG), ("small1", 5), ("small2", 5)):
        _record(url, name, trials)
    with EventStore.open(url, create=False) as store:
        captured: list[tuple[str, Any]] = []

        def capture(conn: Any, cursor: Any, statement: str, parameters: Any,
                    context: Any, executemany: bool) -> None:
            if statement.lstrip().upper().startswith(("SELECT", "WITH")):
                captured.append((statement, parameters))

        event.listen(store.engine, "before_cursor_execute", capture)
        model = ReadModel(store)
        assert model.experiments()
        assert model.trials("big", status="ERROR").total == 0
        assert model.trials("big", sort="failures", limit=10).total == BIG
        assert model.trial("big", "t0007").status == "RUNNING"
        fresh = model.nodes("big")
        assert fresh
        assert model.changed_since("big", model.position("big") - 3).trials
        # Snapshots without their trial's node share (a row written before 0006): a few
        # trials' attempts are read by trial, most trials' through the attempts' index.
        for where in ("trial_id IN ('t0001', 't0002')", "1 = 1"):
            writer = create_engine(url)
            with writer.begin() as conn:
                conn.execute(text(f"UPDATE snapshots SET nodes = NULL WHERE {where}"))
            writer.dispose()
            assert model.nodes("big") == fresh
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
            plans = []
            for statement, parameters in listing:
                plan = _plan(conn, statement, parameters)
                plans.append(plan)
                assert not _reads_every_event(plan), f"{statement}\n{plan}"
                assert "Index" in plan, f"{statement}\n{plan}"
            # The trials come from their first events' partial index, one entry per trial.
            assert any("ix_events_firsts" in plan for plan in plans), plans
            # The check can fail: the per-trial GROUP BY the listings used before is planned
            # as a scan of the table on this log.
            grouped = ("SELECT trial_id, max(seq), min(position) FROM events "
                       "WHERE experiment_id = 1 GROUP BY trial_id")
            plan = _plan(conn, grouped, None)
            assert _reads_every_event(plan), plan


#: Partial indexes: an experiment's entries there are its trials' first events or its
#: attempts, never all of its events.
_PARTIAL = ("ix_events_firsts", "ix_events_attempts")


def _reads_every_event(plan: str) -> bool:
    """Whether the plan reads every event of an experiment (or of the log): a sequential
    scan of ``events``, or an index scan of ``events`` bounded by the experiment alone."""
    if "Seq Scan on events" in plan:
        return True
    index = ""
    for line in plan.splitlines():
        found = re.search(r"Scan(?: Backward)? (?:using|on) (\w+) on events|Bitmap Index "
                          r"Scan on (\w+)", line)
        if found:
            index = found.group(1) or found.group(2)
        elif "Index Cond:" in line and index not in _PARTIAL and re.search(
                r"Index Cond: \(experiment_id = [^()]*\)$", line.strip()):
            return True
    return False


def _plan(conn: Any, statement: str, parameters: Any) -> str:
    cursor = conn.connection.dbapi_connection.cursor()
    cursor.execute("EXPLAIN " + statement, parameters)
    plan = "\n".join(row[0] for row in cursor.fetchall())
    cursor.close()
    return plan
