"""Section ``writes``: one durable record, and a group commit, beside the raw driver.

Same database, same schema (a twin experiment migrated by the store), same row, same
durability: SQLite in WAL mode with ``synchronous=FULL`` through ``sqlite3``; PostgreSQL
through psycopg with its default ``synchronous_commit``. The raw row and insert are those of
``benchmarks/log.py``.

Rows: the raw insert + commit (the limit), ``EventStore.append`` (the store alone, no fold),
``ExperimentLog.record`` (fold + append: what a driver calls), and group commits of 1,000
events (raw ``executemany`` in one transaction vs ``record_many``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import datetime, timezone
from itertools import count
from typing import Any

from benchmarks.harness import Context, Stat, interleaved_ops, per_unit
from benchmarks.log import POLICY, RAW_INSERT, raw_row, running_trial
from statemachine import CheckpointSaved, EventStore, ExperimentLog
from statemachine.log.records import new_event_ids

GROUP = 1_000
GROUPS = 10  # group commits per path and round (they take turns)
GROUP_TARGET = 0.8  # x the raw executemany
RECORD_TARGET = 1.3  # x the raw commit
#: The same paths with SQLite's synchronous=OFF on both sides: no fsync, so the figure is
#: the CPU each path costs (what the code decides; the durable rows depend on the disk).
CPU_ONLY = "SQLite without fsync (CPU only)"


#: The raw COPY of the rows RAW_INSERT inserts.
RAW_COPY = "COPY events ({}) FROM STDIN".format(
    RAW_INSERT.split("(", 1)[1].split(")", 1)[0]
)


def _raw_sqlite(url: str, level: str = "FULL") -> tuple[Any, str, object]:
    conn = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {level}")
    return conn, RAW_INSERT.format(p="?"), "2026-01-01 00:00:00.000000"


def _raw_pg(conninfo: str) -> tuple[Any, str, object]:
    import psycopg

    return psycopg.connect(conninfo), RAW_INSERT.format(p="%s"), datetime.now(timezone.utc)


def _ops(
    log: ExperimentLog, raw: tuple[Any, str, object], exp_id: int, sqlite: bool
) -> tuple[dict[str, Callable[[], None]], dict[str, Callable[[], None]]]:
    """One operation of each path: (single events, group commits)."""
    conn, sql, stamp = raw
    n = count()
    raw_seq = count(1)
    store, session = log.store, log.session
    append_seq = count(0)

    def raw_single() -> None:
        row = raw_row(exp_id, "single", next(raw_seq), stamp)
        if sqlite:
            conn.execute("BEGIN")
            conn.execute(sql, row)
            conn.execute("COMMIT")
        else:
            conn.execute(sql, row)
            conn.commit()

    def store_append() -> None:
        seq = next(append_seq)
        store.append(session, "appended", CheckpointSaved(f"c{seq}"), expected_seq=seq)

    def record() -> None:
        log.record("single", CheckpointSaved(f"c{next(n)}"))

    def raw_group() -> None:
        rows = [raw_row(exp_id, "g", next(raw_seq), stamp) for _ in range(GROUP)]
        if sqlite:
            conn.execute("BEGIN")
            conn.executemany(sql, rows)
            conn.execute("COMMIT")
        else:
            conn.cursor().executemany(sql, rows)
            conn.commit()

    def raw_same_rows() -> None:
        # The floor of our group commit: our rows' event ids (time-ordered, drawn at once),
        # loaded the way we load them (executemany on SQLite, COPY on PostgreSQL).
        rows = [raw_row(exp_id, "g", next(raw_seq), stamp, event_id)
                for event_id in new_event_ids(GROUP)]  # fmt: skip
        if sqlite:
            conn.execute("BEGIN")
            conn.executemany(sql, rows)
            conn.execute("COMMIT")
        else:
            with conn.cursor().copy(RAW_COPY) as copy:
                for row in rows:
                    copy.write_row(row)
            conn.commit()

    def record_many() -> None:
        batch = next(n)
        log.record_many([(f"g{i % 20}", CheckpointSaved(f"c{batch}_{i}")) for i in range(GROUP)])

    singles = {"raw": raw_single, "append": store_append, "record": record}
    return singles, {"raw": raw_group, "raw_same": raw_same_rows, "record_many": record_many}


def _backend(
    ctx: Context, name: str, ours_url: str, raw_url: str,
    raw: Callable[[], tuple[Any, str, object]], level: str = "FULL",
) -> tuple[dict[str, Stat], dict[str, Stat]]:
    singles = ctx.size(300, 40)
    with EventStore.open(raw_url) as store:  # the twin: same migrated schema
        exp_id = store.start_session("raw", policy=POLICY).experiment_id
    connection = raw()
    log = ExperimentLog.open(ours_url, "bench", POLICY, snapshot_every=100,
                             sqlite_synchronous=level)
    try:
        for t in range(20):
            running_trial(log, f"g{t}")
        running_trial(log, "single")
        single_ops, group_ops = _ops(log, connection, exp_id, name.startswith("SQLite"))
        single_times = interleaved_ops(single_ops, singles, ctx.rounds)
        group_times = interleaved_ops(group_ops, ctx.size(GROUPS, 2), ctx.rounds)
    finally:
        log.close()
        connection[0].close()
    single = {k: per_unit(v, singles) for k, v in single_times.items()}
    groups = ctx.size(GROUPS, 2)
    group = {k: per_unit(v, GROUP * groups, scale=1.0).inverted(1.0)
             for k, v in group_times.items()}
    return single, group


def run(ctx: Context) -> None:
    """Measure and print the ``writes`` tables."""
    report = ctx.report
    singles = report.table("writes", "One durable event: raw driver commit vs our record "
                           "(same schema, same row, same durability)", "us/event")
    groups = report.table("writes", f"Group commit of {GROUP:,} events in one transaction",
                          "events/s")
    backends = ["SQLite"] + (["PostgreSQL"] if ctx.pg_url else []) + [CPU_ONLY]
    for name in backends:
        if name == CPU_ONLY:
            raw_url = ctx.sqlite_url("raw-off")
            single, group = _backend(ctx, name, ctx.sqlite_url("ours-off"), raw_url,
                                     lambda raw_url=raw_url: _raw_sqlite(raw_url, "OFF"),
                                     level="OFF")
            level = "sqlite3, WAL, synchronous=OFF"
        elif name == "SQLite":
            raw_url = ctx.sqlite_url("raw")
            single, group = _backend(ctx, name, ctx.sqlite_url("ours"), raw_url,
                                     lambda raw_url=raw_url: _raw_sqlite(raw_url))
            level = "sqlite3, WAL, synchronous=FULL"
        else:
            with ctx.pg_schema() as (ours_url, _), ctx.pg_schema() as (raw_url, raw_info):
                single, group = _backend(ctx, name, ours_url, raw_url,
                                         lambda raw_info=raw_info: _raw_pg(raw_info))
            level = "psycopg, synchronous_commit=on"
        base = single["raw"]
        singles.add(f"{name}: raw insert + commit ({level}) (baseline)", base)
        singles.add(f"{name}: EventStore.append (store only, no fold)", single["append"],
                    versus=base)
        ratio = single["record"].median / base.median
        if name == CPU_ONLY:  # no target: what the code costs with the disk taken out
            singles.add(f"{name}: ExperimentLog.record (fold + append)", single["record"],
                        versus=base)
        else:
            singles.add(f"{name}: ExperimentLog.record (fold + durable append)",
                        single["record"], versus=base, target=f"<= {RECORD_TARGET}x raw",
                        ok=ratio <= RECORD_TARGET)
        gbase = group["raw"]
        groups.add(f"{name}: raw executemany + commit (baseline)", gbase)
        load = "executemany" if name != "PostgreSQL" else "COPY"
        groups.add(f"{name}: raw {load} + commit of our rows (time-ordered ids): the floor",
                   group["raw_same"], versus=gbase)
        ours = group["record_many"]
        gratio = ours.median / gbase.median
        if name == CPU_ONLY:
            groups.add(f"{name}: ExperimentLog.record_many (fold + group commit)", ours,
                       versus=gbase)
            continue
        groups.add(f"{name}: ExperimentLog.record_many (fold + group commit)", ours,
                   versus=gbase, target=f">= {GROUP_TARGET}x raw", ok=gratio >= GROUP_TARGET,
                   measured=f"{gratio:.2f}x ({ours.median:,.0f} events/s)")
    if not ctx.pg_url:
        singles.skip("PostgreSQL", ctx.pg_reason)
    singles.note("ratio: median over the baseline's median (lower is better). Paths "
                 "interleaved op by op; a round's figure is its mean (snapshots included). "
                 f"'{CPU_ONLY}': both sides at synchronous=OFF, no target (the CPU cost).")
    groups.note("ratio: ours over the baseline (higher is better here). 20 trials, "
                "CheckpointSaved events; the raw rows carry the same columns. The baseline "
                "makes each event id with uuid4, as a raw driver would; 'the floor' loads "
                "rows with our time-ordered ids the way the log does (COPY on PostgreSQL): "
                "what a group commit costs with no fold, no checks and no encoding.")
    report.print_table(singles)
    report.print_table(groups)
