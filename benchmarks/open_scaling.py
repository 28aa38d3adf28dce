"""Section ``open``: open an experiment of 1k, 10k and 100k trials x 20 events, with snapshots.

Each size is its own SQLite file, recorded through ``ExperimentLog`` (the 20-event trial
life of ``benchmarks/log.py``: failures, a restore retry, checkpoints) and closed cleanly, so
every trial has a snapshot. Paths per size:

- ``ExperimentLog.open``: what a driver does (start a session, fencing older ones, then
  rehydrate every trial from its snapshot plus the events after it);
- ``rehydrate`` alone (no session);
- the limits: a raw ``sqlite3`` fetch of the snapshot rows with ``json.loads`` of each state,
  and a raw fetch of every event row (what opening without snapshots must at least read).

Targets: open at the largest size within 2.5x the raw snapshot fetch + json (the peak RSS
of both, each in a fresh process, beside it), and a per-trial cost that stays flat (linear
growth) from the smallest size to the largest.
"""

from __future__ import annotations

import json
import sqlite3
import time

from benchmarks.harness import Context, interleaved, peak_rss_mib, per_unit
from benchmarks.log import POLICY, life
from statemachine import EventStore, ExperimentLog
from statemachine.log import rehydrate

EXPERIMENT = "open"
OPEN_TARGET_S = 2.0
SIZES = {True: (100, 1_000), False: (1_000, 10_000, 100_000)}
LINEAR_TARGET = 1.5  # per-trial cost at the largest size over that at the smallest


def build(url: str, trials: int) -> None:
    """Record ``trials`` x 20 events, 50 trials per group commit, then close cleanly."""
    log = ExperimentLog.open(url, EXPERIMENT, POLICY, sqlite_synchronous="OFF")
    for start in range(0, trials, 50):
        log.record_many([item for n in range(start, min(start + 50, trials))
                         for item in life(f"t{n:07d}", n)])
    log.close()  # clean: a snapshot of every trial


def timed_open(url: str) -> float:
    """Seconds to open the log (the close, which ends the session, is not timed)."""
    start = time.perf_counter()
    log = ExperimentLog.open(url, EXPERIMENT, POLICY)
    elapsed = time.perf_counter() - start
    assert len(log.states()) > 0
    log.close(clean=False)  # no new snapshots: the next open reads the same rows
    return elapsed


def raw_snapshots(path: str) -> None:
    """The limit with snapshots: fetch every snapshot row and parse its state."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT trial_id, state FROM snapshots").fetchall()
    finally:
        conn.close()
    loads = json.loads
    for _, state in rows:
        loads(state)


def raw_events(path: str) -> None:
    """What an open without snapshots must at least read: every event row."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("SELECT * FROM events ORDER BY trial_id, seq").fetchall()
    finally:
        conn.close()


OPEN_RATIO_TARGET = 2.5  # ExperimentLog.open over the raw snapshot fetch + json


def _memory(url: str) -> dict[str, float]:
    """Peak RSS of a fresh process opening the log, beside the raw snapshot fetch + json."""
    path = url.removeprefix("sqlite:///")
    return {
        "raw snapshots": peak_rss_mib(
            "from benchmarks.open_scaling import raw_snapshots\n"
            "import statemachine.log\n"
            "raw_snapshots(sys.argv[1])", path),
        "open": peak_rss_mib(
            "from benchmarks.open_scaling import timed_open\n"
            "timed_open(sys.argv[1])", url),
    }


def _measure(ctx: Context, trials: int, memory: dict[str, float]) -> dict[str, list[float]]:
    url = ctx.sqlite_url(f"open{trials}")
    path = url.removeprefix("sqlite:///")
    build(url, trials)
    store = EventStore.open(url, create=False)
    try:
        states = rehydrate(store, EXPERIMENT)
        assert len(states) == trials and all(s.seq == 20 for s in states.values())
        times = interleaved({
            "raw snapshots": lambda: raw_snapshots(path),
            "raw events": lambda: raw_events(path),
            "open": lambda: timed_open(url),
            "rehydrate": lambda: rehydrate(store, EXPERIMENT) and None,
        }, ctx.rounds)
    finally:
        store.close()
    if trials == max(SIZES[ctx.quick]):
        memory.update(_memory(url))
    return times


def run(ctx: Context) -> None:
    """Measure and print the ``open`` table, and the scaling points for the plot."""
    sizes = SIZES[ctx.quick]
    table = ctx.report.table("open", "Open an experiment of N trials x 20 events with snapshots "
                             "(SQLite)", "ms")
    per_trial: dict[int, float] = {}
    memory: dict[str, float] = {}
    for trials in sizes:
        times = _measure(ctx, trials, memory)
        stats = {name: per_unit(t, 1, scale=1e3) for name, t in times.items()}
        base = stats["raw snapshots"]
        table.add(f"{trials:,} trials: raw fetch + json of the snapshot rows (baseline)", base)
        table.add(f"{trials:,} trials: raw fetch of all {trials * 20:,} event rows",
                  stats["raw events"], versus=base)
        table.add(f"{trials:,} trials: rehydrate (snapshots + tails)", stats["rehydrate"],
                  versus=base)
        opened = stats["open"]
        if trials == sizes[-1]:
            ratio = opened.median / base.median
            table.add(f"{trials:,} trials: ExperimentLog.open", opened, versus=base,
                      target=f"<= {OPEN_RATIO_TARGET}x baseline",
                      ok=ratio <= OPEN_RATIO_TARGET,
                      measured=f"{ratio:.2f}x ({opened.median / 1e3:.2f} s)")
        else:
            table.add(f"{trials:,} trials: ExperimentLog.open", opened, versus=base)
        per_trial[trials] = opened.median / trials
        for name, series in (("open", "ExperimentLog.open"), ("rehydrate", "rehydrate"),
                             ("raw snapshots", "raw snapshot fetch + json"),
                             ("raw events", "raw fetch of every event row")):
            ctx.report.point("open", series, trials, stats[name].median / 1e3)
    growth = per_trial[sizes[-1]] / per_trial[sizes[0]]
    table.add(f"per-trial open cost, {sizes[-1]:,} over {sizes[0]:,} trials", None,
              target=f"<= {LINEAR_TARGET}x (linear)", ok=growth <= LINEAR_TARGET,
              measured=f"{growth:.2f}x")
    table.note(f"peak RSS of a fresh process at {sizes[-1]:,} trials: ExperimentLog.open "
               f"{memory['open']:,.0f} MiB, raw snapshot fetch + json "
               f"{memory['raw snapshots']:,.0f} MiB (both import statemachine; "
               f"{memory['open'] / memory['raw snapshots']:.2f}x)")
    table.note("per-trial open cost (us): " + ", ".join(
        f"{n:,}: {v * 1e3:.1f}" for n, v in per_trial.items()))
    ctx.report.print_table(table)
