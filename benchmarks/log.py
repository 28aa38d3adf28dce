"""Event log benchmarks: each figure beside a raw-driver baseline measured in the same run.

    python benchmarks/log.py                 # SQLite and PostgreSQL (if reachable)
    python benchmarks/log.py --no-postgres --trials 2000

Figures (medians, ours and the baseline alternating so both see the same machine state):
- one durable ``ExperimentLog.record`` vs a raw driver insert + commit of the same row into
  the same (migrated) schema: ``sqlite3`` at the same ``synchronous`` level, psycopg; the two
  take turns operation by operation and the medians are compared;
- group commit: ``record_many`` of 1,000 events vs raw ``executemany`` in one transaction;
- rehydrating N trials x 20 events from snapshots, and by full replay, vs a raw fetch of
  every event row.
"""

from __future__ import annotations

import os
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from statemachine import (
    CheckpointSaved,
    Event,
    RestoreError,
    RestoreSucceeded,
    RetryPolicy,
    TrainingError,
    TrialAdded,
    TrialFailed,
    TrialStarted,
)
from statemachine.log import EventStore, ExperimentLog, rehydrate, replay_experiment

DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
POLICY = RetryPolicy(max_failures=-1, restore_retry_num=2)
RAW_INSERT = (
    "INSERT INTO events (experiment_id, trial_id, seq, type_name, version, payload, "
    "error_type, status_before, status_after, decision, counters, epoch, event_id, recorded_at) "
    "VALUES ({p}, {p}, {p}, {p}, {p}, {p}, {p}, {p}, {p}, {p}, {p}, {p}, {p}, {p})"
)
COUNTERS = '{"failures":0,"preemptions":0,"restore_failures":0,"total_restore_failures":0}'


def raw_row(
    experiment_id: int, trial: str, seq: int, recorded_at: object, event_id: str | None = None
) -> tuple:
    """The row a CheckpointSaved record writes, as a raw driver would write it (a uuid4 for
    its event id, unless ``event_id`` is given)."""
    return (
        experiment_id, trial, seq, "CheckpointSaved", 1, f'{{"checkpoint":"c{seq}"}}', None,
        "RUNNING", "RUNNING", None, COUNTERS, 1, event_id or uuid.uuid4().hex, recorded_at,
    )  # fmt: skip


def per_op(fn: Callable[[], None], ops: int) -> float:
    """Microseconds per operation of one call of ``fn`` doing ``ops`` operations."""
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) / ops * 1e6


def interleaved(ours: Callable[[], None], base: Callable[[], None], ops: int) -> tuple:
    """Median us of one operation, ours and the baseline taking turns op by op (fair when the
    machine's load or the disk's latency drifts during the run)."""
    a, b = [], []
    clock = time.perf_counter
    for _ in range(ops):
        t0 = clock()
        base()
        t1 = clock()
        ours()
        t2 = clock()
        b.append(t1 - t0)
        a.append(t2 - t1)
    return statistics.median(a) * 1e6, statistics.median(b) * 1e6


def compare(ours: Callable[[], None], base: Callable[[], None], ops: int, rounds: int) -> tuple:
    """Median us/op of ours and of the baseline, alternating rounds."""
    a, b = [], []
    for _ in range(rounds):
        b.append(per_op(base, ops))
        a.append(per_op(ours, ops))
    return statistics.median(a), statistics.median(b)


class Backend:
    """A database for one benchmark: our log in it, and a raw connection to a twin schema."""

    def __init__(self, name: str, ours_url: str, raw_url: str, synchronous: str) -> None:
        self.name = name
        self.synchronous = synchronous
        self.ours_url = ours_url
        store = EventStore.open(raw_url, sqlite_synchronous=synchronous)  # same schema
        session = store.start_session("raw", policy=POLICY)
        self.raw_experiment_id = session.experiment_id
        store.close()
        self.raw_url = raw_url

    def log(self) -> ExperimentLog:
        return ExperimentLog.open(
            self.ours_url, "bench", POLICY, snapshot_every=100,
            sqlite_synchronous=self.synchronous,
        )  # fmt: skip


def running_trial(log: ExperimentLog, trial: str) -> None:
    log.record_many([(trial, TrialAdded()), (trial, TrialStarted())])


def bench_writes(backend: Backend, singles: int, rounds: int) -> list[tuple]:
    """Single durable record and group commit of 1,000, against the raw driver."""
    log = backend.log()
    for t in range(20):
        running_trial(log, f"g{t}")
    running_trial(log, "single")
    counter = iter(range(10**9))

    def ours_single() -> None:
        log.record("single", CheckpointSaved(f"c{next(counter)}"))

    def ours_group() -> None:
        n = next(counter)
        log.record_many([(f"g{i % 20}", CheckpointSaved(f"c{n}_{i}")) for i in range(1000)])

    raw_seq = iter(range(1, 10**9))
    exp_id = backend.raw_experiment_id
    if backend.name == "SQLite":
        path = backend.raw_url.removeprefix("sqlite:///")
        conn = sqlite3.connect(path)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {backend.synchronous}")
        sql = RAW_INSERT.format(p="?")
        stamp: object = "2026-01-01 00:00:00.000000"
    else:
        import psycopg

        from statemachine.log.engine import make_url

        url = make_url(backend.raw_url)
        options = url.query.get("options")
        conn = psycopg.connect(
            url.set(drivername="postgresql", query={}).render_as_string(hide_password=False),
            **({"options": options} if options else {}),
        )
        sql = RAW_INSERT.format(p="%s")
        from datetime import datetime, timezone

        stamp = datetime.now(timezone.utc)

    def raw_single() -> None:
        conn.execute(sql, raw_row(exp_id, "single", next(raw_seq), stamp))
        conn.commit()

    def raw_group() -> None:
        cursor = conn.cursor()
        cursor.executemany(sql, [raw_row(exp_id, "g", next(raw_seq), stamp) for _ in range(1000)])
        conn.commit()

    single = interleaved(ours_single, raw_single, singles * rounds)
    group = compare(ours_group, raw_group, 1000, rounds)
    log.close()
    conn.close()
    level = f"synchronous={backend.synchronous}" if backend.name == "SQLite" else "psycopg"
    return [
        (f"{backend.name}: one durable record", f"raw insert+commit ({level})", *single, 1.3),
        (f"{backend.name}: record_many(1000), per event", "raw executemany, one txn", *group, 2.0),
    ]


def life(trial: str, n: int) -> list[tuple[str, Event]]:
    """20 events of a trial that fails, retries its restore and goes on."""
    events: list[Event] = [TrialAdded(config={"n": n}), TrialStarted(), CheckpointSaved("c1")]
    events += [TrialFailed(error=TrainingError("builtins.ValueError", "nan")), TrialStarted()]
    events += [TrialFailed(error=RestoreError("builtins.OSError", "io")), TrialStarted()]
    events += [RestoreSucceeded()] + [CheckpointSaved(f"c{i}") for i in range(2, 13)]
    return [(trial, e) for e in events]  # + the PolicySet the log writes first = 20


def bench_rehydrate(url: str, trials: int, rounds: int) -> list[tuple]:
    """Rehydrate ``trials`` x 20 events from snapshots and by full replay vs a raw fetch."""
    log = ExperimentLog.open(url, "rehydrate", POLICY, sqlite_synchronous="OFF")
    for start in range(0, trials, 50):
        log.record_many([item for n in range(start, start + 50) for item in life(f"t{n:06d}", n)])
    log.close()  # clean: snapshots every trial
    store = EventStore.open(url, create=False)
    events = trials * 20
    expected = rehydrate(store, "rehydrate")
    assert len(expected) == trials and all(s.seq == 20 for s in expected.values())
    assert {t: r.state for t, r in replay_experiment(store, "rehydrate").items()} == expected
    path = url.removeprefix("sqlite:///")

    def raw_fetch() -> None:
        conn = sqlite3.connect(path)
        conn.execute("SELECT * FROM events ORDER BY trial_id, seq").fetchall()
        conn.close()

    snap = compare(lambda: rehydrate(store, "rehydrate"), raw_fetch, 1, rounds)
    full = compare(lambda: replay_experiment(store, "rehydrate"), raw_fetch, 1, rounds)
    store.close()
    label = f"SQLite: rehydrate {trials:,} trials x 20 events"
    return [
        (f"{label}, snapshots (ms)", f"raw fetch of {events:,} rows", snap[0] / 1e3,
         snap[1] / 1e3, None),
        (f"{label}, full replay (ms)", f"raw fetch of {events:,} rows", full[0] / 1e3,
         full[1] / 1e3, None),
    ]  # fmt: skip


def pg_schema_url(server_url: str) -> tuple[str, Callable[[], None]] | None:
    """A URL on a fresh schema, and the function dropping it; None if unreachable."""
    try:
        import psycopg
    except ImportError:
        return None
    from statemachine.log.engine import make_url

    libpq = make_url(server_url).set(drivername="postgresql").render_as_string(False)
    try:
        admin = psycopg.connect(libpq, autocommit=True, connect_timeout=3)
    except psycopg.Error:
        return None
    schema = f"sm_bench_{uuid.uuid4().hex[:10]}"
    admin.execute(f'CREATE SCHEMA "{schema}"')
    url = make_url(server_url).update_query_dict({"options": f"-csearch_path={schema}"})

    def drop() -> None:
        admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
        admin.close()

    return url.render_as_string(hide_password=False), drop


@click.command()
@click.option("--singles", default=300, show_default=True, help="Single records per round.")
@click.option("--rounds", default=7, show_default=True, help="Rounds per figure (median).")
@click.option("--trials", default=10_000, show_default=True, help="Trials to rehydrate.")
@click.option("--synchronous", default="FULL", show_default=True, help="SQLite level.")
@click.option("--postgres/--no-postgres", default=True, show_default=True)
@click.option(
    "--pg-url", default=lambda: os.environ.get("STATEMACHINE_TEST_PG_URL", DEFAULT_PG_URL)
)
def main(
    singles: int, rounds: int, trials: int, synchronous: str, postgres: bool, pg_url: str
) -> None:
    """Print the event log's figures beside their baselines."""
    console = Console(width=150)
    rows: list[tuple] = []
    with tempfile.TemporaryDirectory() as tmp:
        sqlite = Backend(
            "SQLite", f"sqlite:///{tmp}/ours.db", f"sqlite:///{tmp}/raw.db", synchronous.upper()
        )
        rows += bench_writes(sqlite, singles, rounds)
        if postgres:
            ours, raw = pg_schema_url(pg_url), pg_schema_url(pg_url)
            if ours is None or raw is None:
                console.print(f"[yellow]PostgreSQL not reachable at {pg_url}: skipped[/]")
            else:
                try:
                    rows += bench_writes(Backend("PostgreSQL", ours[0], raw[0], "FULL"),
                                         singles, rounds)  # fmt: skip
                finally:
                    ours[1]()
                    raw[1]()
        rows += bench_rehydrate(f"sqlite:///{tmp}/rehydrate.db", trials, max(3, rounds // 2))
    table = Table(title=f"Event log (median of {rounds} rounds; us per event unless noted)")
    for column in ("figure", "ours", "baseline", "baseline is", "ratio", "target"):
        table.add_column(column, justify="left" if column in ("figure", "baseline is") else "right")
    for figure, baseline_name, ours_value, base_value, target in rows:
        ratio = ours_value / base_value
        verdict = "" if target is None else ("ok" if ratio <= target else "MISSED")
        table.add_row(
            figure, f"{ours_value:,.1f}", f"{base_value:,.1f}", baseline_name, f"{ratio:.2f}x",
            f"<= {target}x {verdict}" if target else "",
        )  # fmt: skip
    console.print(table)
    console.print(f"python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}")


if __name__ == "__main__":
    main()
