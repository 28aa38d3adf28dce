"""Several driver processes write one log while the CLI reads it (kept from the red-team pass).

Six writer processes, each the driver of its own experiment in the same database (a SQLite
file, or PostgreSQL), record events one by one and in group commits as fast as they can and
print every acknowledged event id; meanwhile this process runs ``trial-replay experiments``,
``trials`` and ``verify`` on the same database in a loop. Every acknowledged event is in the
log exactly once, nothing else is, every read exits 0, and nobody ever sees "database is
locked".
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from tests.faults.faultkit import REPO, Figures, LogCount, check_log, run_cli

pytestmark = [pytest.mark.faults, pytest.mark.slow]

WRITERS = 6
#: How long each writer records (the reads run meanwhile).
WRITE_S = 4.0

WRITER = """
import random
import sys
import time

from statemachine import CheckpointSaved, RetryPolicy, TrialAdded, TrialStarted
from statemachine.log import ExperimentLog
from statemachine.log.records import new_event_ids

url, experiment, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
rng = random.Random(experiment)
log = ExperimentLog.open(url, experiment, RetryPolicy(max_failures=-1))
print("READY", flush=True)
trials = [f"t{i}" for i in range(5)]
for trial in trials:
    ids = new_event_ids(2)
    log.record_many([(trial, TrialAdded(config={"w": experiment})), (trial, TrialStarted())],
                    event_ids=ids)
    print("A", *ids, flush=True)
deadline, n = time.monotonic() + seconds, 0
while time.monotonic() < deadline:
    n += 1
    items = [(rng.choice(trials), CheckpointSaved(f"{experiment}-{n}-{k}"))
             for k in range(rng.choice([1, 1, 3, 10]))]
    ids = new_event_ids(len(items))
    if len(items) == 1:
        log.record(items[0][0], items[0][1], event_id=ids[0])
    else:
        log.record_many(items, event_ids=ids)
    print("A", *ids, flush=True)
log.close()
"""


class Writer:
    """One writer process and the event ids it saw acknowledged."""

    def __init__(self, url: str, experiment: str) -> None:
        self.experiment = experiment
        self.process = subprocess.Popen(
            [sys.executable, "-c", WRITER, url, experiment, str(WRITE_S)], cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.acked: list[str] = []
        self.ready = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("READY"):
                self.ready.set()
            elif line.startswith("A "):
                self.acked += line.split()[1:]

    def finish(self) -> str:
        _, err = self.process.communicate(timeout=300)
        self._reader.join(timeout=30)
        return err


def stored_events(acked: frozenset[str]) -> Callable[[LogCount], dict[str, Counter[Any]]]:
    """The log's event ids, to count against the acknowledged ones. A trial's first event
    comes with the PolicySet the log writes for it, under that event's id + "/p": it is
    counted as part of that event."""

    def found(log: LogCount) -> dict[str, Counter[Any]]:
        policies = [r for r in log.rows if r.type_name == "PolicySet"]
        assert {r.event_id.removesuffix("/p") for r in policies} <= acked
        return {"events": Counter(r.event_id for r in log.rows if r not in policies)}

    return found


def run_writers_and_readers(url: str, backend: str,
                            reliability: Callable[[Figures], None]) -> None:
    writers = [Writer(url, f"w{i}") for i in range(WRITERS)]
    try:
        for writer in writers:
            assert writer.ready.wait(120), f"{writer.experiment} never started:\n{writer.finish()}"
        reads: Counter[str] = Counter()
        problems: list[str] = []
        names = itertools.cycle(w.experiment for w in writers)
        started = time.monotonic()
        while any(w.process.poll() is None for w in writers):
            experiment = next(names)
            for args in (["experiments", "--json"], ["trials", "--json", "--", experiment],
                         ["verify", "--json", "--", experiment]):
                code, out, err = run_cli("--db", url, *args)
                reads[args[0]] += 1
                if code != 0 or "locked" in out + err:
                    problems.append(f"{args}: exit {code}: {err.strip()[:300]}")
        took = time.monotonic() - started
        errors = {w.experiment: w.finish() for w in writers}
    finally:
        for writer in writers:
            if writer.process.poll() is None:
                writer.process.kill()
                writer.process.wait(timeout=30)
    assert not problems, problems[:5]
    for writer in writers:
        assert writer.process.returncode == 0, errors[writer.experiment]
        assert "locked" not in errors[writer.experiment], errors[writer.experiment]
    assert min(reads.values()) >= 3, f"too few reads while the writers ran: {reads}"

    lost = duplicates = written = 0
    for writer in writers:
        figures = check_log(
            url, writer.experiment, scenario=f"Concurrent writers and readers ({backend})",
            injected=f"{WRITERS} driver processes (one experiment each) record events one "
                     f"by one and in group commits into one {backend} log while this process "
                     "runs experiments, trials and verify on it in a loop",
            times=WRITERS, expected={"events": Counter(writer.acked)},
            found=stored_events(frozenset(writer.acked)),
        )
        lost, duplicates = lost + figures.events_lost, duplicates + figures.duplicates
        written += figures.events_written
    reliability(Figures(
        scenario=f"Concurrent writers and readers ({backend})",
        injected=f"{WRITERS} driver processes (one experiment each) record events one by one "
                 f"and in group commits into one {backend} log while the CLI reads it in a "
                 f"loop ({sum(reads.values())} reads in {took:.1f} s)",
        times=WRITERS, events_written=written, events_lost=lost, duplicates=duplicates,
        verify=f"ok ({WRITERS}/{WRITERS}); every read exit 0, no \"database is locked\"",
        details={"reads": dict(reads), "seconds": round(took, 1)},
    ))


def test_sqlite_writer_processes_with_concurrent_cli_reads(
    sqlite_url: str, reliability: Callable[[Figures], None]
) -> None:
    run_writers_and_readers(sqlite_url, "SQLite", reliability)


@pytest.mark.postgres
def test_postgres_writer_processes_with_concurrent_cli_reads(
    pg_url: str, reliability: Callable[[Figures], None]
) -> None:
    run_writers_and_readers(pg_url, "PostgreSQL", reliability)
