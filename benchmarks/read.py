"""Section ``read``: the replay CLI's read commands on a big shared log, each in a fresh
process (start-up included), beside raw-SQL baselines measured in the same run.

The log (SQLite, and PostgreSQL when reachable) holds one experiment of N trials x 20 events
(the trial life of ``benchmarks/log.py``, recorded through ``ExperimentLog`` and closed
cleanly, so every trial has a snapshot) plus 9 experiments of N/100 trials: the shared log of
issue 25 (N = 100,000 there; ``BENCH_READ_TRIALS`` sets N, 10,000 by default, 300 under
``--quick``; ``BENCH_READ_DB=URL`` / ``BENCH_READ_PG_DB=URL`` read an existing log of that
shape instead of building). On PostgreSQL the plans the listings get are printed after the
table (which index reads ``events``, and whether any statement scans it).

Paths, each a fresh interpreter, wall time and peak RSS (``VmHWM``):

- ``trial-replay --db LOG db current``: the CLI's fixed start-up, what every read command
  pays before it reads (the interpreter, the log's code, opening the database and checking
  its schema revision); ``trial-replay --version`` beside it, without a target (it loads no
  command and no database code since the commands are imported on first use, so it is no
  longer the read commands' fixed cost);
- baselines (a fresh interpreter too): a raw fetch + ``json.loads`` of every snapshot row of
  the log, of the big experiment's snapshot rows, and of the big experiment's event rows
  (their payloads);
- ``experiments``, ``trials big --status ERROR``, ``nodes big``, ``show`` / ``explain`` of one
  trial, ``verify big``;
- the served experiment page: ``trial-replay serve`` started, then its first answer for
  ``/e/big`` over HTTP read to the last byte (the server's start-up included, as a person
  opening the page after starting it waits for both).

Targets (issue 25): ``experiments`` <= 2x (all snapshot rows + start-up); ``trials
--status``, ``nodes``, the served page <= 2.5x (the experiment's snapshot rows + start-up);
``show`` / ``explain`` <= 2x start-up; ``verify`` <= 4x (its event rows + start-up); peak RSS
<= 400 MiB.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import Context, Stat, python
from benchmarks.log import POLICY, life
from statemachine import ExperimentLog

BIG = "big"
SMALL = 9
#: The row every target is relative to: a read command's fixed cost.
STARTUP = "start-up: trial-replay db current"

_CHILD = r"""
import atexit, sys, time
def _hwm():
    line = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0]
    open(sys.argv[1], 'w').write(line.split()[1])
atexit.register(_hwm)
kind, url, rest = sys.argv[2], sys.argv[3], sys.argv[4:]
if kind == 'cli':
    from statemachine.cli import main
    code = main(rest)
    sys.exit(0 if code in (0, 1) else code)
import json
from sqlalchemy import create_engine, text
engine = create_engine(url)
with engine.connect() as conn:
    driver = conn.connection.dbapi_connection
    cur = driver.cursor()
    if kind == 'raw-all-snapshots':
        cur.execute("SELECT trial_id, state FROM snapshots")
    elif kind == 'raw-snapshots':
        cur.execute("SELECT s.trial_id, s.state FROM snapshots s JOIN experiments e "
                    "ON e.id = s.experiment_id WHERE e.name = '%s'" % rest[0])
    else:
        cur.execute("SELECT v.trial_id, v.payload FROM events v JOIN experiments e "
                    "ON e.id = v.experiment_id WHERE e.name = '%s' "
                    "ORDER BY v.trial_id, v.seq" % rest[0])
    loads = json.loads
    for _, doc in cur.fetchall():
        loads(doc)
"""


def build(url: str, trials: int) -> None:
    """The shared log: ``big`` of ``trials`` trials, 9 more of ``trials // 100``."""
    for name, count in [(BIG, trials)] + [(f"small{i}", max(trials // 100, 1))
                                          for i in range(1, SMALL + 1)]:
        log = ExperimentLog.open(url, name, POLICY, sqlite_synchronous="OFF")
        for start in range(0, count, 50):
            log.record_many([item for n in range(start, min(start + 50, count))
                             for item in life(f"t{n:07d}", n)])
        log.close()


def once(kind: str, url: str, *args: str) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one fresh interpreter doing ``kind``."""
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss:
        env = {**os.environ, "COLUMNS": "200"}
        start = time.perf_counter()
        done = subprocess.run([python(), "-c", _CHILD, rss.name, kind, url, *args],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              env=env, check=False, timeout=3600,
                              cwd=str(Path(__file__).resolve().parents[1]))
        wall = time.perf_counter() - start
        if done.returncode not in (0, 1):
            raise RuntimeError(f"{kind} {args}: exit {done.returncode}: {done.stderr[-400:]}")
        return wall, int(rss.read() or 0) / 1024


def served(url: str, experiment: str) -> tuple[float, float]:
    """Wall seconds from starting ``trial-replay serve`` (a fresh interpreter) to the last
    byte of its first answer for the experiment's page over HTTP, and the server's peak RSS
    (MiB) once it stopped (Ctrl-C, as a person stops it)."""
    import signal
    import urllib.request

    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss:
        start = time.perf_counter()
        server = subprocess.Popen(
            [python(), "-c", _CHILD, rss.name, "cli", url, "--db", url, "serve", "--port",
             "0", experiment], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "COLUMNS": "200"}, cwd=str(Path(__file__).resolve().parents[1]))
        try:
            assert server.stdout is not None
            line = server.stdout.readline()  # "Serving http://127.0.0.1:PORT/e/big (...)"
            if not line.startswith("Serving "):
                raise RuntimeError(f"serve did not start: {line!r}")
            with urllib.request.urlopen(line.split()[1], timeout=3600) as answer:
                body = answer.read()
            wall = time.perf_counter() - start
            if experiment.encode() not in body:
                raise RuntimeError("serve: the experiment page does not name the experiment")
        finally:
            server.send_signal(signal.SIGINT)
            try:
                server.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                server.kill()
                server.communicate()
        return wall, int(rss.read() or 0) / 1024


def paths(url: str) -> dict[str, tuple[str, ...]]:
    """Every path of the table: a label -> ``(kind, args...)``."""
    cli = ("cli", "--db", url)
    return {
        STARTUP: (*cli, "db", "current"),
        "trial-replay --version": ("cli", "--version"),
        "raw: every snapshot row + json": ("raw-all-snapshots",),
        "raw: big's snapshot rows + json": ("raw-snapshots", BIG),
        "raw: big's event rows + json": ("raw-events", BIG),
        "experiments": (*cli, "experiments"),
        "trials big --status ERROR": (*cli, "trials", BIG, "--status", "ERROR"),
        "nodes big": (*cli, "nodes", BIG),
        "show big t0000007": (*cli, "show", BIG, "t0000007"),
        "explain big t0000007": (*cli, "explain", BIG, "t0000007"),
        "verify big": (*cli, "verify", BIG),
        "serve: first load of /e/big": ("served", BIG),
    }


def measure(url: str, rounds: int, skip: tuple[str, ...] = ()) -> dict[str, tuple[Stat, float]]:
    """Each path's wall time (s) and its highest peak RSS (MiB), rounds interleaved."""
    chosen = {k: v for k, v in paths(url).items() if k not in skip}
    walls: dict[str, list[float]] = {k: [] for k in chosen}
    rss: dict[str, float] = dict.fromkeys(chosen, 0.0)
    for r in range(rounds):
        names = list(chosen)
        names = names[r % len(names):] + names[:r % len(names)]
        for name in names:
            kind, *args = chosen[name]
            if kind == "served":
                wall, peak = served(url, *args)
            elif kind == "cli":
                wall, peak = once("cli", url, *args)
            else:
                wall, peak = once(kind, _plain(url), *args)
            walls[name].append(wall)
            rss[name] = max(rss[name], peak)
    return {k: (Stat.of(v), rss[k]) for k, v in walls.items()}


def _plain(url: str) -> str:
    return url


TARGETS = {  # path -> (baseline path, ratio) ; start-up added to the baseline
    "experiments": ("raw: every snapshot row + json", 2.0),
    "trials big --status ERROR": ("raw: big's snapshot rows + json", 2.5),
    "nodes big": ("raw: big's snapshot rows + json", 2.5),
    "show big t0000007": (None, 2.0),
    "explain big t0000007": (None, 2.0),
    "verify big": ("raw: big's event rows + json", 4.0),
    "serve: first load of /e/big": ("raw: big's snapshot rows + json", 2.5),
}
RSS_TARGET_MIB = 400


def report(ctx: Context, backend: str, trials: int, figures: dict[str, tuple[Stat, float]],
           given: bool = False) -> None:
    """Print one backend's table with ratios and verdicts."""
    shape = (f"the given log ({BIG}: {trials:,} trials)" if given else
             f"shared log of {trials:,} + {SMALL} x {max(trials // 100, 1):,} trials")
    table = ctx.report.table(
        "read", f"Read commands, {backend}: {shape} x 20 events, fresh process each", "s")
    startup = figures[STARTUP][0]
    for label, (stat, peak) in figures.items():
        target = TARGETS.get(label)
        note = f"peak RSS {peak:,.0f} MiB"
        if target is None:
            table.add(label, stat, note=note)
            continue
        base_label, ratio = target
        base = startup if base_label is None else figures[base_label][0]
        limit = ratio * base.median + (startup.median if base_label is not None else 0)
        # The verdict's own form: ``(ours - start-up) / baseline`` (``ours / start-up``).
        over = (stat.median - startup.median) / base.median if base_label is not None \
            else stat.median / base.median
        measured = f"{over:.2f}x, {peak:,.0f} MiB"
        against = "start-up" if base_label is None else "baseline + start-up"
        table.add(label, stat, versus=base,
                  target=f"<= {ratio}x {against}, <= {RSS_TARGET_MIB} MiB",
                  ok=stat.median <= limit and peak <= RSS_TARGET_MIB, measured=measured,
                  note=note)
    ctx.report.print_table(table)


def run(ctx: Context) -> None:
    """Build (or take) the shared log on SQLite, and PostgreSQL when reachable; measure."""
    trials = int(os.environ.get("BENCH_READ_TRIALS", ctx.size(10_000, 300)))
    given = os.environ.get("BENCH_READ_DB")
    url = given or ctx.sqlite_url("read")
    if not given:
        build(url, trials)
    report(ctx, "SQLite", trials, measure(url, ctx.rounds), given=bool(given))
    if os.environ.get("BENCH_READ_NO_PG") or ctx.pg_url is None:
        ctx.report.say(f"read: PostgreSQL skipped ({ctx.pg_reason or 'BENCH_READ_NO_PG'})")
        return
    pg_trials = int(os.environ.get("BENCH_READ_PG_TRIALS", trials))
    given_pg = os.environ.get("BENCH_READ_PG_DB")
    if given_pg:
        report(ctx, "PostgreSQL", pg_trials, measure(given_pg, ctx.rounds), given=True)
        plans(ctx, given_pg)
        return
    with ctx.pg_schema() as (pg, _):
        build(pg, pg_trials)
        report(ctx, "PostgreSQL", pg_trials, measure(pg, ctx.rounds))
        plans(ctx, pg)


def plans(ctx: Context, url: str) -> None:
    """PostgreSQL's own plan (its statistics, sequential scans allowed) of every statement
    the listings run on ``big``: which index each reads ``events`` through, and whether any
    scans the table (``tests/log/test_read_plans.py`` proves an index path exists; this
    shows the one the planner picks at this size)."""
    from sqlalchemy import event, text

    from statemachine.log import EventStore
    from statemachine.log.read import ReadModel

    with EventStore.open(url, create=False) as store:
        captured: list[tuple[str, Any]] = []

        def capture(conn: object, cursor: object, statement: str, parameters: object,
                    context: object, executemany: bool) -> None:
            if statement.lstrip().upper().startswith(("SELECT", "WITH")) and "events" in statement:
                captured.append((statement, parameters))

        event.listen(store.engine, "before_cursor_execute", capture)
        model = ReadModel(store)
        model.experiments()
        model.trials(BIG, status="ERROR")
        model.trials(BIG, sort="failures", limit=100)
        model.nodes(BIG)
        model.changed_since(BIG, model.position(BIG) - 20)
        event.remove(store.engine, "before_cursor_execute", capture)
        with store.engine.connect() as conn:
            conn.execute(text("ANALYZE"))
            raw = conn.connection.dbapi_connection
            seen: dict[tuple[str, str], int] = {}
            for statement, parameters in captured:
                cursor = raw.cursor()  # type: ignore[union-attr]
                cursor.execute("EXPLAIN " + statement, parameters)
                plan = [row[0] for row in cursor.fetchall()]
                cursor.close()
                reads = sorted({line.strip().removeprefix("->  ").split("  (")[0]
                                for line in plan if " on events" in line})
                key = (" ".join(statement.split())[:100], "; ".join(reads))
                seen[key] = seen.get(key, 0) + 1
            for (shown, how), count in seen.items():
                scan = "Seq Scan on events" in how
                ctx.report.say(f"read plan, {count} statement(s), "
                               f"{'SEQUENTIAL SCAN of events' if scan else 'no seq scan'}: "
                               f"{shown}... -> {how}")
