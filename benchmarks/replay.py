"""Section ``replay``: fold a whole experiment read from SQLite, beside raw read + dict fold.

The experiment (1M events; 20k under ``--quick``) is recorded through ``ExperimentLog`` from
the generated histories of ``benchmarks/fsm.py`` (checkpoints, pauses, training, actor,
preemption and restore failures), trials interleaved in commit order as a live run writes
them. Paths, every one reading the same rows and reaching the same final states (checked
before timing):

- the limit: ``sqlite3`` fetch of the rows, ``json.loads`` + unchecked construction of each
  event, fold through the hand-written dict table of ``benchmarks/fsm.py``;
- ours: ``replay_experiment`` (steps not kept: the store's lean paged read of the columns a
  fold needs, typed decode, ``fold_compiled`` per trial through the table compiled from the
  ``transitions`` machine);
- where the time goes: the store's lean read alone (``read_fold_rows``), then with the
  typed decode; and, for scale, the full read (rows to ``StoredEvent``) that
  ``replay_experiment(keep_steps=True)`` and ``read_experiment`` pay.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator

from benchmarks.fsm import BASELINE, POLICY, construct_unchecked, generate_history
from benchmarks.harness import Context, interleaved, peak_rss_mib, per_unit
from statemachine import EventStore, ExperimentLog, TrialState, replay_experiment
from statemachine.domain.events import Event, decode_event

EXPERIMENT = "replay"
TARGET = 3.0
RAW_SELECT = ("SELECT e.trial_id, e.type_name, e.payload FROM events e "
              "JOIN experiments x ON x.id = e.experiment_id WHERE x.name = ? "
              "ORDER BY e.position")


def interleaved_events(total: int, active: int = 500) -> Iterator[list[tuple[str, Event]]]:
    """``total``-ish events in chunks: ``active`` trials at a time, their events round-robin."""
    histories = generate_history(2_000)
    written = 0
    first = 0
    while written < total:
        group = [(f"trial_{first + i:07d}", histories[(first + i) % len(histories)][1])
                 for i in range(active)]
        first += active
        longest = max(len(events) for _, events in group)
        chunk = [(trial_id, events[k]) for k in range(longest) for trial_id, events in group
                 if k < len(events)]
        written += len(chunk)
        yield chunk


def build(url: str, total: int, active: int = 500) -> int:
    """Record the experiment; returns the number of events."""
    count = 0
    log = ExperimentLog.open(url, EXPERIMENT, POLICY, snapshot_every=10**9,
                             sqlite_synchronous="OFF")
    try:
        for chunk in interleaved_events(total, active):
            for start in range(0, len(chunk), 5_000):
                log.record_many(chunk[start:start + 5_000])
            count += len(chunk)
    finally:
        log.close(clean=False)
    return count


def raw_read(path: str) -> list[tuple[str, str, str]]:
    """The limit's read: every row of the experiment, one fetch."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute(RAW_SELECT, (EXPERIMENT,)).fetchall()
    finally:
        conn.close()


def raw_read_dict_fold(path: str) -> dict[str, TrialState]:
    """The limit: raw read, unchecked construction, the hand-written dict table."""
    states: dict[str, TrialState] = {}
    table = BASELINE
    loads = json.loads
    for trial_id, type_name, payload in raw_read(path):
        event = construct_unchecked(type_name, loads(payload))
        state = states.get(trial_id)
        if state is None:
            state = states[trial_id] = TrialState(trial_id)
        table[(event.trigger, state.status)](state, event, state.policy)
        state.seq += 1
    return states


def run(ctx: Context) -> None:
    """Measure and print the ``replay`` table."""
    url = ctx.sqlite_url("replay")
    path = url.removeprefix("sqlite:///")
    events = build(url, ctx.size(1_000_000, 5_000), active=ctx.size(500, 50))
    store = EventStore.open(url, create=False)
    try:
        expected = raw_read_dict_fold(path)
        replayed = replay_experiment(store, EXPERIMENT)
        assert {t: r.state for t, r in replayed.items()} == expected, "paths disagree"
        del replayed

        def store_read() -> None:
            for _ in store.read_experiment(EXPERIMENT):
                pass

        def lean_read() -> None:
            for _ in store.read_fold_rows(EXPERIMENT):
                pass

        def lean_read_decode() -> None:
            loads = json.loads
            for row in store.read_fold_rows(EXPERIMENT):
                decode_event(row[3], row[4], loads(row[5]))

        times = interleaved({
            "raw read": lambda: raw_read(path) and None,
            "baseline": lambda: raw_read_dict_fold(path) and None,
            "replay": lambda: replay_experiment(store, EXPERIMENT) and None,
            "lean read": lean_read,
            "lean read+decode": lean_read_decode,
            "read": store_read,
        }, min(ctx.rounds, 3))
    finally:
        store.close()
    memory = {
        "baseline": peak_rss_mib(
            "from benchmarks.replay import raw_read_dict_fold\n"
            "import statemachine.log\n"
            "raw_read_dict_fold(sys.argv[1])", path),
        "replay": peak_rss_mib(
            "from benchmarks.replay import EXPERIMENT\n"
            "from statemachine import EventStore\n"
            "from statemachine.log import replay_experiment\n"
            "with EventStore.open(sys.argv[1], create=False) as store:\n"
            "    replay_experiment(store, EXPERIMENT)", url),
    }
    stats = {name: per_unit(t, events) for name, t in times.items()}
    table = ctx.report.table(
        "replay", f"Replay an experiment of {events:,} events ({len(expected):,} trials) "
        "read from SQLite", "us/event")
    base = stats["baseline"]
    table.add("raw sqlite3 read of the rows only", stats["raw read"], versus=base)
    table.add("raw read + json + unchecked events + dict-table fold (baseline)", base)
    ratio = stats["replay"].median / base.median
    table.add("replay_experiment (store read, typed decode, compiled fold)", stats["replay"],
              versus=base, target=f"<= {TARGET}x baseline", ok=ratio <= TARGET,
              measured=f"{ratio:.2f}x ({stats['replay'].median * events / 1e6:.1f} s)")
    table.add("  of which: EventStore.read_fold_rows (lean tuples)", stats["lean read"],
              versus=base)
    table.add("  of which: lean read + typed decode (decode_event)", stats["lean read+decode"],
              versus=base)
    table.add("for scale: EventStore.read_experiment (rows to StoredEvent)", stats["read"],
              versus=base)
    table.note("The fold (and the counters check) is the rest: replay minus lean read + "
               "decode. Every path reaches the same final state of every trial (checked "
               "before timing).")
    table.note(f"peak RSS of a fresh process: replay_experiment {memory['replay']:,.0f} MiB, "
               f"raw read + dict fold {memory['baseline']:,.0f} MiB "
               f"({memory['replay'] / memory['baseline']:.2f}x; both import statemachine).")
    ctx.report.print_table(table)
