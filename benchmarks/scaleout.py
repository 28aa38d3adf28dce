"""Section ``scaleout``: driver processes, each its own experiment, appending to one PostgreSQL.

Each driver process opens its own experiment with ``ExperimentLog`` on the same database,
adds and starts its trials, waits at a barrier until every driver is ready, then records
``appends`` single durable events (``CheckpointSaved`` round-robin over its trials), timing
each. The raw baseline does the same with psycopg (insert + commit of the same row into a twin
schema), the same number of processes at once. Reported per process count: aggregate
throughput (events acknowledged / wall time from the first start to the last end) and the
p99 append latency over every append of every driver.

Checked after every run of ours: each experiment holds exactly the events its driver was
acknowledged for, no more (no duplicate) and no fewer (none lost), ``(trial, seq)`` without a
gap, and ``verify`` (the fold reproduces every recorded status and decision) passes.
"""

from __future__ import annotations

import multiprocessing
import queue
import time
from datetime import datetime, timezone
from typing import Any

from benchmarks.harness import Context, Stat

TRIALS_PER_DRIVER = 10
DRIVERS = 8


def _ours_driver(url: str, name: str, appends: int, barrier: Any, results: Any) -> None:
    from benchmarks.log import POLICY, running_trial
    from statemachine import CheckpointSaved, ExperimentLog

    log = ExperimentLog.open(url, name, POLICY, snapshot_every=10**6)
    try:
        for t in range(TRIALS_PER_DRIVER):
            running_trial(log, f"t{t}")
        barrier.wait(timeout=300)
        latencies = []
        start = time.perf_counter()
        for i in range(appends):
            began = time.perf_counter()
            log.record(f"t{i % TRIALS_PER_DRIVER}", CheckpointSaved(f"c{i}"))
            latencies.append(time.perf_counter() - began)
        end = time.perf_counter()
    finally:
        log.close(clean=False)
    results.put((name, start, end, latencies))


def _raw_driver(conninfo: str, name: str, appends: int, barrier: Any, results: Any) -> None:
    import psycopg

    from benchmarks.log import POLICY, RAW_INSERT, raw_row
    from statemachine import EventStore

    url = conninfo.replace("postgresql://", "postgresql+psycopg://", 1)
    with EventStore.open(url) as store:
        experiment_id = store.start_session(name, policy=POLICY).experiment_id
    sql = RAW_INSERT.format(p="%s")
    stamp = datetime.now(timezone.utc)
    with psycopg.connect(conninfo) as conn:
        barrier.wait(timeout=300)
        latencies = []
        start = time.perf_counter()
        for i in range(appends):
            began = time.perf_counter()
            conn.execute(sql, raw_row(experiment_id, f"t{i % TRIALS_PER_DRIVER}", i + 1, stamp))
            conn.commit()
            latencies.append(time.perf_counter() - began)
        end = time.perf_counter()
    results.put((name, start, end, latencies))


def _run_drivers(target: Any, where: str, processes: int, appends: int) -> tuple[float, float]:
    """Start ``processes`` drivers at once; (events/s over the wall time, p99 latency in ms)."""
    mp = multiprocessing.get_context("spawn")
    barrier = mp.Barrier(processes)
    results = mp.Queue()
    workers = [mp.Process(target=target, args=(where, f"driver-{i}", appends, barrier, results))
               for i in range(processes)]
    for worker in workers:
        worker.start()
    collected = []
    deadline = time.monotonic() + 600
    try:
        while len(collected) < processes:
            try:
                collected.append(results.get(timeout=1))
            except queue.Empty:
                dead = [w.exitcode for w in workers if w.exitcode not in (None, 0)]
                if dead or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"a driver process failed (exit codes {dead}; its traceback is above)"
                        if dead else "driver processes did not finish within 600 s") from None
    finally:
        for worker in workers:
            worker.join(timeout=30)
            if worker.is_alive():  # a driver stuck at the barrier after another one failed
                worker.terminate()
                worker.join()
    wall = max(end for _, _, end, _ in collected) - min(start for _, start, _, _ in collected)
    latencies = sorted(x for *_, lat in collected for x in lat)
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] * 1e3
    return len(latencies) / wall, p99


def check_log(url: str, processes: int, appends: int) -> None:
    """Every acknowledged event is stored once, none lost, no gap; ``verify`` passes."""
    from sqlalchemy import text

    from statemachine import EventStore, verify

    with EventStore.open(url, create=False) as store:
        for i in range(processes):
            name = f"driver-{i}"
            with store.engine.connect() as conn:
                total, distinct_ids, seq_sum, checkpoints = conn.execute(text(
                    "SELECT count(*), count(DISTINCT e.event_id), "
                    "(SELECT sum(m) FROM (SELECT max(seq) AS m FROM events e2 "
                    " WHERE e2.experiment_id = x.id GROUP BY trial_id) s), "
                    "sum(CASE WHEN e.type_name = 'CheckpointSaved' THEN 1 ELSE 0 END) "
                    "FROM events e JOIN experiments x ON x.id = e.experiment_id "
                    "WHERE x.name = :name GROUP BY x.id"), {"name": name}).one()
            # 3 rows a trial before the timed appends: PolicySet, TrialAdded, TrialStarted
            expected = appends + 3 * TRIALS_PER_DRIVER
            if not (total == distinct_ids == seq_sum == expected and checkpoints == appends):
                raise AssertionError(
                    f"{name}: {total} rows ({distinct_ids} distinct ids, seq sum {seq_sum}, "
                    f"{checkpoints} checkpoints), expected {expected} with {appends} appends")
            result = verify(store, name)
            if not result.ok:
                raise AssertionError(f"{name}: verify failed: {result}")


def run(ctx: Context) -> None:
    """Measure and print the ``scaleout`` tables, and the scaling points for the plot."""
    report = ctx.report
    throughput = report.table("scaleout", "Scale-out: N driver processes, each its own "
                              "experiment, single durable appends to one PostgreSQL at once",
                              "events/s")
    latency = report.table("scaleout", "Scale-out: p99 latency of one append over every "
                           "append of every driver", "ms")
    if not ctx.pg_url:
        throughput.skip("PostgreSQL", ctx.pg_reason)
        report.print_table(throughput)
        return
    counts = (2,) if ctx.quick else (1, 2, 4, DRIVERS)  # quick: a smoke run of the machinery
    appends = ctx.size(400, 25)
    rounds = 1 if ctx.quick else min(ctx.rounds, 3)
    checked = 0
    for processes in counts:
        runs: dict[str, list[tuple[float, float]]] = {"raw": [], "ours": []}
        for r in range(rounds):
            order = ("raw", "ours") if r % 2 == 0 else ("ours", "raw")
            for path in order:
                with ctx.pg_schema() as (url, conninfo):
                    if path == "raw":
                        runs[path].append(_run_drivers(_raw_driver, conninfo, processes, appends))
                    else:
                        runs[path].append(_run_drivers(_ours_driver, url, processes, appends))
                        check_log(url, processes, appends)
                        checked += processes
        stats = {p: (Stat.of([t for t, _ in v]), Stat.of([q for _, q in v]))
                 for p, v in runs.items()}
        base_t, base_q = stats["raw"]
        ours_t, ours_q = stats["ours"]
        throughput.add(f"{processes} process(es): raw psycopg insert + commit (baseline)",
                       base_t)
        latency.add(f"{processes} process(es): raw psycopg insert + commit (baseline)", base_q)
        if processes == DRIVERS:
            throughput.add(f"{processes} processes: ExperimentLog.record", ours_t, versus=base_t,
                           target="aggregate throughput, nothing lost", ok=True,
                           measured=f"{ours_t.median:,.0f} events/s "
                                    f"({ours_t.median / base_t.median:.2f}x raw)")
            latency.add(f"{processes} processes: ExperimentLog.record", ours_q, versus=base_q,
                        target="p99 append latency", ok=True,
                        measured=f"{ours_q.median:.1f} ms ({base_q.median:.1f} ms raw)")
        else:
            throughput.add(f"{processes} process(es): ExperimentLog.record", ours_t,
                           versus=base_t)
            latency.add(f"{processes} process(es): ExperimentLog.record", ours_q, versus=base_q)
        for name, (t, q) in (("ExperimentLog.record", stats["ours"]),
                             ("raw psycopg insert + commit", stats["raw"])):
            report.point("scaleout-throughput", name, processes, t.median)
            report.point("scaleout-p99", name, processes, q.median)
    throughput.note(f"{appends:,} appends per driver over {TRIALS_PER_DRIVER} trials, "
                    f"median of {rounds} runs; every run of ours checked after: "
                    f"{checked} experiment logs, each holding exactly its acknowledged events "
                    "(none lost, none doubled, no seq gap) and passing verify.")
    report.print_table(throughput)
    report.print_table(latency)
