"""Section ``peers``: the ``eventsourcing`` recorders and Optuna's storages on the same work.

Installed only with the ``bench`` extra (``pip install -e '.[bench]'``); without them the
rows say so. Every peer runs beside ours and the raw driver, in the same rounds:

- ``eventsourcing`` (SQLite and PostgreSQL application recorders): 1,000 aggregates x 20
  events (a trial's life: added, started, a checkpoint, a training failure, a failed and a
  retried restore, checkpoints), the aggregates interleaved, one event per ``save`` (one
  commit); then every aggregate rebuilt from its events (``repository.get``). Ours: the same
  20 events per trial through ``ExperimentLog.record`` (one commit each; the policy's
  ``PolicySet`` row rides in the first one), then ``replay_experiment``. Raw: an insert +
  commit per row, then one fetch of every row.
- Optuna ``RDBStorage`` (SQLite, PostgreSQL) and ``JournalStorage`` (a journal file, fsynced
  per append): create a trial, then set it COMPLETE; two commits per trial. Ours: the trial's
  ``TrialAdded`` + ``TrialStarted`` in one ``record_many``, then ``TrialCompleted``.

Durability: SQLite in WAL mode at ``synchronous=FULL`` for ours, the raw baseline and
eventsourcing (its connections keep SQLite's default, FULL); Optuna's RDBStorage uses
SQLite's default rollback journal (also FULL). PostgreSQL: ``synchronous_commit=on`` for all.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import time
import uuid
from collections.abc import Callable
from typing import Any
from uuid import UUID

from benchmarks.harness import Context, Stat, interleaved, interleaved_ops, per_unit
from benchmarks.log import POLICY, life
from statemachine import (
    CheckpointSaved,
    ExperimentLog,
    TrialAdded,
    TrialCompleted,
    TrialStarted,
    replay_experiment,
)
from statemachine.domain.events import Event

RAW_INSERT = ("INSERT INTO rows (trial_id, seq, type_name, payload, recorded_at) "
              "VALUES ({p}, {p}, {p}, {p}, {p})")


def trial_life(trial: str, n: int) -> list[Event]:
    """20 events: the life of ``benchmarks/log.py`` and one more checkpoint."""
    return [e for _, e in life(trial, n)] + [CheckpointSaved("c13")]


# ---------------------------------------------------------------- eventsourcing


@functools.cache
def _es_classes() -> tuple[type, type]:
    """The aggregate and application classes (built once: eventsourcing registers topics)."""
    from eventsourcing.application import Application
    from eventsourcing.domain import Aggregate, event

    class PeerTrial(Aggregate):  # type: ignore[misc]
        """A trial as an eventsourcing aggregate: the same 20 facts."""

        @event("Added")
        def __init__(self, n: int) -> None:
            self.n = n
            self.status = "PENDING"
            self.checkpoints: list[str] = []
            self.failures = 0

        @event("Started")
        def start(self) -> None:
            self.status = "RUNNING"

        @event("CheckpointSaved")
        def checkpoint(self, name: str) -> None:
            self.checkpoints.append(name)

        @event("Failed")
        def fail(self, kind: str, message: str) -> None:
            self.failures += 1
            self.status = "PENDING"

        @event("Restored")
        def restored(self) -> None:
            self.status = "RUNNING"

    class Trials(Application[UUID]):  # type: ignore[misc]
        """The application holding the trials."""

    return PeerTrial, Trials


def _es_step(trial: Any, event: Event) -> None:
    name = event.type_name
    if name == "TrialStarted":
        trial.start()
    elif name == "CheckpointSaved":
        trial.checkpoint(event.checkpoint)  # type: ignore[attr-defined]
    elif name == "TrialFailed":
        trial.fail(event.error.kind, event.error.message)  # type: ignore[attr-defined]
    elif name == "RestoreSucceeded":
        trial.restored()
    else:
        raise ValueError(name)


def eventsourcing_round(env: dict[str, str], trials: int, rebuilds: list[float]) -> float:
    """One round: write the interleaved lives (timed, returned), rebuild (into ``rebuilds``)."""
    peer_trial, app_class = _es_classes()
    app = app_class(env=env)
    lives = [trial_life(f"t{n}", n) for n in range(trials)]
    start = time.perf_counter()
    aggregates = []
    for n in range(trials):
        aggregate = peer_trial(n)
        app.save(aggregate)
        aggregates.append(aggregate)
    for k in range(1, 20):
        for aggregate, events in zip(aggregates, lives, strict=True):
            _es_step(aggregate, events[k])
            app.save(aggregate)
    written = time.perf_counter() - start
    start = time.perf_counter()
    rebuilt = [app.repository.get(a.id) for a in aggregates]
    rebuilds.append(time.perf_counter() - start)
    assert all(r.version == 20 and len(r.checkpoints) == 13 for r in rebuilt)
    app.close()
    return written


def ours_round(url: str, trials: int, rebuilds: list[float]) -> float:
    """Ours on the same work: a durable record per event, then a full replay."""
    lives = [trial_life(f"t{n}", n) for n in range(trials)]
    log = ExperimentLog.open(url, "peers", POLICY)
    start = time.perf_counter()
    for k in range(20):
        for n, events in enumerate(lives):
            log.record(f"t{n}", events[k])
    written = time.perf_counter() - start
    start = time.perf_counter()
    replayed = replay_experiment(log.store, "peers")
    rebuilds.append(time.perf_counter() - start)
    # 21 rows a trial: the PolicySet (written in the same commit as TrialAdded) and the 20.
    assert len(replayed) == trials and all(r.state.seq == 21 for r in replayed.values())
    log.close(clean=False)
    return written


class RawTable:
    """The raw driver on the same work: a row per event, one commit each; one fetch back."""

    def __init__(self, connect: Callable[[], Any], placeholder: str, sqlite: bool) -> None:
        """``connect`` opens a new connection on an empty database or schema."""
        self.connect = connect
        self.sqlite = sqlite
        self.sql = RAW_INSERT.format(p=placeholder)

    def create(self, conn: Any) -> None:
        """The table, on a new connection."""
        conn.execute("CREATE TABLE rows (position INTEGER PRIMARY KEY, trial_id TEXT, seq INT, "
                     "type_name TEXT, payload TEXT, recorded_at TEXT, UNIQUE (trial_id, seq))"
                     if self.sqlite else
                     "CREATE TABLE rows (position BIGSERIAL PRIMARY KEY, trial_id TEXT, seq INT, "
                     "type_name TEXT, payload TEXT, recorded_at TEXT, UNIQUE (trial_id, seq))")
        if not self.sqlite:
            conn.commit()

    def insert(self, conn: Any, row: tuple[Any, ...]) -> None:
        """One row, one commit."""
        if self.sqlite:
            conn.execute("BEGIN")
            conn.execute(self.sql, row)
            conn.execute("COMMIT")
        else:
            conn.execute(self.sql, row)
            conn.commit()

    def round(self, trials: int, rebuilds: list[float], per_trial: list[list[Event]]) -> float:
        """One round: insert + commit every event (timed, returned), then fetch them."""
        conn = self.connect()
        self.create(conn)
        payload = '{"checkpoint":"c1"}'
        start = time.perf_counter()
        for k in range(20):
            for n, events in enumerate(per_trial):
                row = (f"t{n}", k + 1, events[k].type_name, payload, "2026-01-01 00:00:00")
                if self.sqlite:
                    conn.execute("BEGIN")
                    conn.execute(self.sql, row)
                    conn.execute("COMMIT")
                else:
                    conn.execute(self.sql, row)
                    conn.commit()
        written = time.perf_counter() - start
        start = time.perf_counter()
        rows = conn.execute("SELECT * FROM rows ORDER BY trial_id, seq").fetchall()
        rebuilds.append(time.perf_counter() - start)
        assert len(rows) == trials * 20
        conn.close()
        return written


def append_op_by_op(
    connect_raw: Callable[[], Any], raw_sqlite: bool, ours_url: str, es_env: dict[str, str],
    trials: int, rounds: int,
) -> dict[str, Stat]:
    """Durable appends of the three paths taking turns event by event (rotating who goes
    first), so a drift of the disk's fsync latency hits them alike; us per event."""
    peer_trial, app_class = _es_classes()
    lives = [trial_life(f"t{n}", n) for n in range(trials)]
    order = [(n, k) for k in range(20) for n in range(trials)]
    count = len(order) // rounds
    raw = RawTable(connect_raw, "?" if raw_sqlite else "%s", sqlite=raw_sqlite)
    conn = connect_raw()
    raw.create(conn)
    log = ExperimentLog.open(ours_url, "peers", POLICY)
    app = app_class(env=es_env)
    aggregates: dict[int, Any] = {}
    steps = {name: iter(order) for name in ("raw", "ours", "es")}
    payload = '{"checkpoint":"c1"}'

    def raw_op() -> None:
        n, k = next(steps["raw"])
        row = (f"t{n}", k + 1, lives[n][k].type_name, payload, "2026-01-01 00:00:00")
        raw.insert(conn, row)

    def ours_op() -> None:
        n, k = next(steps["ours"])
        log.record(f"t{n}", lives[n][k])

    def es_op() -> None:
        n, k = next(steps["es"])
        if k == 0:
            aggregate = aggregates[n] = peer_trial(n)
        else:
            aggregate = aggregates[n]
            _es_step(aggregate, lives[n][k])
        app.save(aggregate)

    try:
        times = interleaved_ops({"raw": raw_op, "ours": ours_op, "es": es_op}, count, rounds)
    finally:
        conn.close()
        log.close(clean=False)
        app.close()
    return {name: per_unit(t, count) for name, t in times.items()}


def _sqlite_connect(ctx: Context) -> Callable[[], Any]:
    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(ctx.workdir / f"raw-{uuid.uuid4().hex[:8]}.db",
                               isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        return conn
    return connect


# ---------------------------------------------------------------- Optuna


def optuna_round(make_storage: Callable[[], Any], trials: int) -> float:
    """Create ``trials`` trials and complete each; seconds."""
    from optuna.study import StudyDirection
    from optuna.trial import TrialState as OptunaState

    storage = make_storage()
    study = storage.create_new_study(directions=[StudyDirection.MINIMIZE],
                                     study_name=f"bench-{uuid.uuid4().hex[:6]}")
    start = time.perf_counter()
    for i in range(trials):
        trial_id = storage.create_new_trial(study)
        storage.set_trial_state_values(trial_id, OptunaState.COMPLETE, values=[float(i)])
    elapsed = time.perf_counter() - start
    assert len(storage.get_all_trials(study, deepcopy=False)) == trials
    if hasattr(storage, "engine"):
        storage.engine.dispose()
    return elapsed


def ours_trials_round(url: str, trials: int) -> float:
    """Ours: add + start in one commit, complete in another, per trial; seconds."""
    log = ExperimentLog.open(url, f"optuna-{uuid.uuid4().hex[:6]}", POLICY)
    start = time.perf_counter()
    for i in range(trials):
        log.record_many([(f"t{i}", TrialAdded()), (f"t{i}", TrialStarted())])
        log.record(f"t{i}", TrialCompleted())
    elapsed = time.perf_counter() - start
    log.close(clean=False)
    return elapsed


# ---------------------------------------------------------------- the section


def _missing() -> str | None:
    missing = []
    for package in ("eventsourcing", "optuna"):
        try:
            __import__(package)
        except ImportError:
            missing.append(package)
    if missing:
        return (f"{' and '.join(missing)} not installed: the peers come with the bench extra, "
                "pip install -e '.[bench]'")
    return None


def _es_pg_env(pg_url: str, schema: str) -> dict[str, str]:
    from sqlalchemy.engine import make_url

    url = make_url(pg_url)
    return {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": url.database or "postgres",
        "POSTGRES_HOST": url.host or "127.0.0.1",
        "POSTGRES_PORT": str(url.port or 5432),
        "POSTGRES_USER": url.username or "postgres",
        "POSTGRES_PASSWORD": url.password or "",
        "POSTGRES_SCHEMA": schema,
    }


def _event_store_rows(ctx: Context, backend: str, trials: int) -> None:
    """The eventsourcing table for one backend (SQLite or PostgreSQL)."""
    import psycopg

    per_trial = [trial_life(f"t{n}", n) for n in range(trials)]
    rebuilds: dict[str, list[float]] = {"raw": [], "ours": [], "es": []}
    if backend == "SQLite":
        raw = RawTable(_sqlite_connect(ctx), "?", sqlite=True)
        works = {
            "raw": lambda: raw.round(trials, rebuilds["raw"], per_trial),
            "ours": lambda: ours_round(ctx.sqlite_url("ours-es"), trials, rebuilds["ours"]),
            "es": lambda: eventsourcing_round(
                {"PERSISTENCE_MODULE": "eventsourcing.sqlite",
                 "SQLITE_DBNAME": str(ctx.workdir / f"es-{uuid.uuid4().hex[:8]}.db")},
                trials, rebuilds["es"]),
        }
        times = interleaved(works, min(ctx.rounds, 3))
    else:
        schemas: list[Any] = []

        def fresh() -> tuple[str, str, str]:
            manager = ctx.pg_schema()
            url, conninfo = manager.__enter__()
            schemas.append(manager)
            return url, conninfo, conninfo.rsplit("%3D", 1)[1]

        def pg_raw() -> float:
            _, conninfo, _ = fresh()
            return RawTable(lambda: psycopg.connect(conninfo), "%s", sqlite=False).round(
                trials, rebuilds["raw"], per_trial)

        def pg_es() -> float:
            _, _, schema = fresh()
            return eventsourcing_round(_es_pg_env(ctx.pg_url or "", schema), trials,
                                       rebuilds["es"])

        try:
            times = interleaved({
                "raw": pg_raw,
                "ours": lambda: ours_round(fresh()[0], trials, rebuilds["ours"]),
                "es": pg_es,
            }, min(ctx.rounds, 3))
        finally:
            for manager in schemas:
                manager.__exit__(None, None, None)
    events = trials * 20
    write = {k: per_unit(v, events) for k, v in times.items()}
    read = {k: per_unit(v, events) for k, v in rebuilds.items()}
    table = ctx.report.table(
        "peers", f"{backend}: {trials:,} aggregates x 20 events, one commit per event, then "
        "rebuild every one", "us/event")
    _rows(table, "append", write, {
        "raw": "raw insert + commit per event (baseline)",
        "ours": "ours: ExperimentLog.record (fold + durable append)",
        "es": "eventsourcing: save() per event",
    })
    ops = _op_by_op(ctx, backend, trials)
    _rows(table, "append op by op", ops, {
        "raw": "raw insert + commit (baseline)",
        "ours": "ours: ExperimentLog.record",
        "es": "eventsourcing: save()",
    })
    ahead = ops["ours"].median / ops["es"].median
    table.add("append op by op: ours over eventsourcing", None,
              target="< 1.0x (ahead)", ok=ahead < 1.0,
              measured=f"{ahead:.2f}x ({backend})")
    table.note("append (whole rounds): each path writes its 20,000 events in turn; append op "
               "by op: the three paths take turns event by event (the figure to read when the "
               "disk's fsync latency drifts), its own fresh databases.")
    _rows(table, "rebuild", read, {
        "raw": "raw fetch of every row (baseline)",
        "ours": "ours: replay_experiment (decode + fold)",
        "es": "eventsourcing: repository.get per aggregate",
    })
    ctx.report.print_table(table)


def _op_by_op(ctx: Context, backend: str, trials: int) -> dict[str, Stat]:
    rounds = min(ctx.rounds, 3)
    if backend == "SQLite":
        return append_op_by_op(
            _sqlite_connect(ctx), True, ctx.sqlite_url("ours-ops"),
            {"PERSISTENCE_MODULE": "eventsourcing.sqlite",
             "SQLITE_DBNAME": str(ctx.workdir / f"es-ops-{uuid.uuid4().hex[:8]}.db")},
            trials, rounds)
    import psycopg

    with ctx.pg_schema() as (ours_url, _), ctx.pg_schema() as (_, raw_info), \
            ctx.pg_schema() as (_, es_info):
        return append_op_by_op(
            lambda: psycopg.connect(raw_info), False, ours_url,
            _es_pg_env(ctx.pg_url or "", es_info.rsplit("%3D", 1)[1]), trials, rounds)


def _rows(table: Any, what: str, stats: dict[str, Stat], labels: dict[str, str]) -> None:
    base = stats["raw"]
    for key, label in labels.items():
        table.add(f"{what}: {label}", stats[key], versus=None if key == "raw" else base)


def _optuna_rows(ctx: Context, trials: int) -> None:
    from optuna.storages import JournalStorage, RDBStorage
    from optuna.storages.journal import JournalFileBackend

    def rdb_sqlite() -> Any:
        return RDBStorage(f"sqlite:///{ctx.workdir / f'optuna-{uuid.uuid4().hex[:8]}.db'}")

    def journal() -> Any:
        path = ctx.workdir / f"optuna-{uuid.uuid4().hex[:8]}.log"
        return JournalStorage(JournalFileBackend(str(path)))

    works: dict[str, Callable[[], Any]] = {
        "ours SQLite": lambda: ours_trials_round(ctx.sqlite_url("ours-optuna"), trials),
        "RDBStorage SQLite": lambda: optuna_round(rdb_sqlite, trials),
        "JournalStorage file": lambda: optuna_round(journal, trials),
    }
    schemas: list[Any] = []
    if ctx.pg_url:
        def pg_url() -> str:
            manager = ctx.pg_schema()
            schemas.append(manager)
            return manager.__enter__()[0]

        works["ours PostgreSQL"] = lambda: ours_trials_round(pg_url(), trials)
        works["RDBStorage PostgreSQL"] = lambda: optuna_round(lambda: RDBStorage(pg_url()),
                                                              trials)
    try:
        times = interleaved(works, ctx.rounds)
    finally:
        for manager in schemas:
            manager.__exit__(None, None, None)
    stats = {k: per_unit(v, trials, scale=1e3) for k, v in times.items()}
    table = ctx.report.table("peers", f"{trials:,} trials created and completed, two commits "
                             "per trial", "ms/trial")
    base = stats["ours SQLite"]
    table.add("ours: record_many(add, start) + record(complete), SQLite (baseline)", base)
    table.add("Optuna RDBStorage, SQLite", stats["RDBStorage SQLite"], versus=base)
    table.add("Optuna JournalStorage, journal file (fsync per append)",
              stats["JournalStorage file"], versus=base)
    if ctx.pg_url:
        pg = stats["ours PostgreSQL"]
        table.add("ours: record_many(add, start) + record(complete), PostgreSQL", pg,
                  versus=base)
        table.add("Optuna RDBStorage, PostgreSQL", stats["RDBStorage PostgreSQL"], versus=pg)
    else:
        table.skip("PostgreSQL", ctx.pg_reason)
    table.note("ratio: over ours on the same database (lower is better); Optuna's PostgreSQL "
               "row is over ours on PostgreSQL.")
    ctx.report.print_table(table)


def run(ctx: Context) -> None:
    """Measure and print the ``peers`` tables."""
    missing = _missing()
    if missing:
        table = ctx.report.table("peers", "Peers", "us/event")
        table.skip("eventsourcing, Optuna", missing)
        ctx.report.print_table(table)
        return
    import logging

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.getLogger("eventsourcing").setLevel(logging.WARNING)
    os.environ.setdefault("SQLALCHEMY_WARN_20", "0")
    aggregates = ctx.size(1_000, 10)
    _event_store_rows(ctx, "SQLite", aggregates)
    if ctx.pg_url:
        _event_store_rows(ctx, "PostgreSQL", aggregates)
    else:
        skipped = ctx.report.table("peers", "PostgreSQL: eventsourcing", "us/event")
        skipped.skip("PostgreSQL", ctx.pg_reason)
        ctx.report.print_table(skipped)
    _optuna_rows(ctx, ctx.size(300, 10))
