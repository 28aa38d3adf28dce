"""``serve``'s experiment page at 1,000 / 10,000 / 100,000 trials: its size (at most 2 MB,
issue 25 item 3, whatever the trial count) and the time to build it, beside the time of a
raw fetch + ``json.loads`` of the experiment's snapshot rows in the same run.

The log is written with the public API (``ExperimentLog.record_many``): each trial added and
started on one of three machines (two events: the page's size depends on the trials, not on
their history), closed cleanly so every trial has a snapshot. The page is built in process
(``Pages.experiment``, what one request of ``serve`` does, without the HTTP).
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import contextmanager
from typing import TYPE_CHECKING

from benchmarks.harness import Stat, interleaved
from statemachine.cli.db import open_store
from statemachine.cli.output import Output
from statemachine.cli.web import Pages
from statemachine.domain.events import TrialAdded, TrialStarted
from statemachine.domain.nodes import NodeRef
from statemachine.domain.policy import RetryPolicy
from statemachine.log import ExperimentLog

if TYPE_CHECKING:
    from collections.abc import Iterator

    from benchmarks.harness import Context
    from statemachine.log import EventStore

EXPERIMENT = "web"
MOST_BYTES = 2_000_000
MACHINES = [NodeRef(f"{i}{i}" * 28, f"10.0.0.{i}", f"worker-{i}") for i in (1, 2, 3)]


def build(url: str, trials: int) -> None:
    """``trials`` trials of two events each, in groups of 1,000, closed cleanly."""
    log = ExperimentLog.open(url, EXPERIMENT, RetryPolicy(), sqlite_synchronous="OFF")
    try:
        for start in range(0, trials, 1000):
            log.record_many([item for n in range(start, min(start + 1000, trials))
                             for item in ((f"t{n:06d}", TrialAdded()),
                                          (f"t{n:06d}", TrialStarted(node=MACHINES[n % 3])))])
    finally:
        log.close()


def raw_snapshots(path: str) -> int:
    """The baseline: every snapshot row of the log, fetched and decoded."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT trial_id, state FROM snapshots").fetchall()
    finally:
        conn.close()
    loads = json.loads
    return sum(1 for _, state in rows if loads(state))


def run(ctx: Context) -> None:
    """Measure and print the ``web`` table."""
    table = ctx.report.table("web", "serve: the experiment page (one request, no HTTP)", "s")
    sizes = [1_000, 10_000, 100_000] if not ctx.quick else [500, 2_000]
    rounds = max(1, min(ctx.rounds, 3))
    for trials in sizes:
        url = ctx.sqlite_url(f"web{trials}")
        path = url.removeprefix("sqlite:///")
        build(url, trials)

        @contextmanager
        def opened(url: str = url) -> Iterator[EventStore]:
            with open_store(url) as store:
                yield store

        pages = Pages(opened, Output(db=url))
        page = pages.experiment(EXPERIMENT)
        size = len(page.encode("utf-8"))
        times = interleaved({"raw": lambda path=path: raw_snapshots(path) and None,
                             "page": lambda pages=pages: pages.experiment(EXPERIMENT) and None},
                            rounds)
        raw = Stat.of(times["raw"])
        table.add(f"{trials:,} trials: raw fetch + json.loads of the snapshots", raw)
        table.add(f"{trials:,} trials: the experiment page", Stat.of(times["page"]),
                  versus=raw)
        table.add(f"{trials:,} trials: page size", None, measured=f"{size:,} bytes",
                  target=f"<= {MOST_BYTES:,} bytes", ok=size <= MOST_BYTES)
    table.note("The page holds one page of the table (100 rows), a timeline of at most 20 "
               "trials and the status counts: its size does not grow with the trial count. "
               "Its build time is the read model's (statemachine.log.read), which the page "
               "asks for the counts, the page of trials and the last position.")
    ctx.report.print_table(table)
