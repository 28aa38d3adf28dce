"""Section ``ingest``: ``trial-replay ingest`` of a 1,000-trial Ray folder, beside a raw read.

The folder is generated in Ray's format (what Ray 2.40-2.60 write, as the committed folders
of ``tests/data/ingest`` show): one ``experiment_state-*.json`` whose trials carry a pickled
checkpoint manager, and per trial ``params.json``, ``result.json`` (20 results, the
auto-filled columns Ray adds), ``error.txt`` in Ray's words and ``checkpoint_*`` folders
(one every 5 iterations). 60% of the trials run clean; 20% fail once and recover from their
checkpoint; 10% fail twice and end ERROR (``max_failures=1``); 10% fail once, then their
``load_checkpoint`` fails twice (``TUNE_RESTORE_RETRY_NUM=2``) before it restores. 50 trials
under ``--quick``. Paths, on the same folder (checked first: every ingest agrees with the
statuses and counts the generator wrote):

- the limit: a raw read of the same files: list the folder and each trial folder, read
  every JSON file and parse it (state file, each result line, params), read ``error.txt``;
- ours, in steps: ``read_experiment`` (parse into values, the checkpoint manager's opcodes
  scanned), then with the reconstruction (``plan_ingest``: events folded as they are made),
  then the whole ``ingest`` into a new SQLite log (``synchronous=FULL``: one transaction,
  snapshots, ``verify``-ready), and an ingest of the same folder again (nothing new: the log
  is read back and nothing written).
"""

from __future__ import annotations

import json
import os
import pickle
import random
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks.harness import Context, interleaved, per_unit

EXPERIMENT = "bench_ingest"
START = 1_796_100_000.0
ITERATIONS = 20
CHECKPOINT_EVERY = 5

_TRAIN = """ray::Bench.train() (pid={pid}, ip=10.0.0.{node}, actor_id={actor}, repr=Bench)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/venv/lib/python3.11/site-packages/ray/tune/trainable/trainable.py", line 331, in train
    raise skipped from exception_cause(skipped)
  File "/venv/lib/python3.11/site-packages/ray/tune/trainable/trainable.py", line 328, in train
    result = self.step()
             ^^^^^^^^^^^
  File "/home/user/bench.py", line 20, in step
    raise ValueError(f"bad batch at iteration {{self.i}}")
ValueError: bad batch at iteration {iteration}"""
_RESTORE = """ray::Bench.restore() (pid={pid}, ip=10.0.0.{node}, actor_id={actor}, repr=Bench)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/venv/lib/python3.11/site-packages/ray/tune/trainable/trainable.py", line 575, in restore
    self.load_checkpoint(checkpoint_dir)
  File "/home/user/bench.py", line 30, in load_checkpoint
    raise OSError("checkpoint unreadable")
OSError: checkpoint unreadable"""


def _stamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%d_%H-%M-%S")


class _Trial:
    """One trial's run, written as Ray writes it."""

    def __init__(self, index: int, folder: Path, rng: random.Random) -> None:
        self.trial_id = f"be7c1_{index:05d}"
        self.dir = f"Bench_{self.trial_id}_{index}_lr={index % 7}_{_stamp(START)}"
        self.path = folder / self.dir
        self.config = {"lr": 0.001 * (index % 7 + 1), "batch": 32, "layers": [64, 64]}
        self.node = index % 4 + 1
        self.pid = 10_000 + index * 10
        self.t = START + index * 0.37
        self.iteration = self.since = 0
        self.rows: list[str] = []
        self.failures: list[str] = []
        self.failed = 0
        self.checkpoints: list[tuple[int, int]] = []  # (iteration, timestamp)
        self.rng = rng

    def report(self) -> None:
        self.iteration += 1
        self.since += 1
        self.t += 1.0
        row = {
            "loss": 1.0 / self.iteration, "done": self.iteration == ITERATIONS,
            "training_iteration": self.iteration, "trial_id": self.trial_id,
            "date": _stamp(self.t), "timestamp": int(self.t), "time_this_iter_s": 1.0,
            "time_total_s": float(self.iteration), "pid": self.pid, "hostname": f"node{self.node}",
            "node_ip": f"10.0.0.{self.node}", "config": self.config,
            "time_since_restore": float(self.since), "iterations_since_restore": self.since,
        }
        self.rows.append(json.dumps(row))
        if self.iteration % CHECKPOINT_EVERY == 0:
            self.checkpoints.append((self.iteration, int(self.t)))

    def fail(self, text: str, counted: bool) -> None:
        self.failed += counted
        self.t += 0.5
        body = text.format(pid=self.pid, node=self.node, actor=uuid.UUID(int=self.pid).hex,
                           iteration=self.iteration + 1)
        self.failures.append(f"Failure # {self.failed} (occurred at {_stamp(self.t)})\n{body}\n")
        self.pid += 1
        self.t += 1.5

    def restart(self) -> None:
        self.iteration = self.checkpoints[-1][0] if self.checkpoints else 0
        self.since = 0

    def run(self, kind: str) -> tuple[str, int]:
        fail_at = self.rng.randint(7, 12)
        while self.iteration < ITERATIONS:
            if self.iteration + 1 == fail_at and kind != "clean":
                self.fail(_TRAIN, counted=True)
                if kind == "errored" and self.failed == 2:
                    return "ERROR", 2
                if kind == "restore":
                    for _ in range(2):
                        self.fail(_RESTORE, counted=False)
                self.restart()
                fail_at = fail_at + 5 if kind == "errored" else -1
                continue
            self.report()
        return "TERMINATED", self.failed

    def write(self) -> None:
        self.path.mkdir()
        (self.path / "params.json").write_text(json.dumps(self.config, indent=2))
        (self.path / "result.json").write_text("".join(f"{r}\n" for r in self.rows))
        if self.failures:
            (self.path / "error.txt").write_text("".join(self.failures))
        for index in range(len(self.checkpoints)):
            (self.path / f"checkpoint_{index:06d}").mkdir()
            (self.path / f"checkpoint_{index:06d}" / "state.json").write_text('{"i": 0}')

    def state(self, status: str) -> list[str]:
        manager = {"_checkpoint_results": [
            {"checkpoint": {"path": str(self.path / f"checkpoint_{index:06d}")},
             "metrics": {"training_iteration": iteration, "timestamp": stamp}}
            for index, (iteration, stamp) in enumerate(self.checkpoints)]}
        trial = {"trial_id": self.trial_id, "status": status, "relative_logdir": self.dir,
                 "config": self.config, "max_failures": 1, "trainable_name": "Bench"}
        meta = {"num_failures": self.failed, "last_result_time": self.t,
                "error_filename": "error.txt" if self.failures else None,
                "checkpoint_manager": {"_type": "CLOUDPICKLE_FALLBACK",
                                       "value": pickle.dumps(manager).hex()}}
        return [json.dumps(trial), json.dumps(meta)]


def make_experiment(folder: Path, trials: int, seed: int = 0) -> dict[str, list[Any]]:
    """Write a ``trials``-trial experiment folder in Ray's format; Ray's view of it."""
    rng = random.Random(seed)
    folder.mkdir(parents=True)
    view: dict[str, list[Any]] = {}
    data = []
    for index in range(trials):
        trial = _Trial(index, folder, rng)
        kind = rng.choices(["clean", "recovered", "errored", "restore"], [6, 2, 1, 1])[0]
        status, failures = trial.run(kind)
        trial.write()
        view[trial.trial_id] = [status, failures]
        data.append(trial.state(status))
    document = {"trial_data": data,
                "runner_data": {"_session_str": _stamp(START)},
                "stats": {"start_time": START}}
    (folder / f"experiment_state-{_stamp(START)}.json").write_text(json.dumps(document))
    return view


def raw_read(folder: Path) -> int:
    """The limit: every file an ingest reads, read and parsed as JSON; the rows read."""
    rows = 0
    loads = json.loads
    for state in folder.glob("experiment_state-*.json"):
        for trial, meta in loads(state.read_bytes())["trial_data"]:
            loads(trial)
            loads(meta)
    with os.scandir(folder) as entries:
        for entry in entries:
            if not entry.is_dir():
                continue
            with os.scandir(entry.path) as inside:
                names = {item.name: item.stat().st_mtime for item in inside}
            loads(Path(entry.path, "params.json").read_bytes())
            for line in Path(entry.path, "result.json").read_bytes().splitlines():
                loads(line)
                rows += 1
            if "error.txt" in names:
                Path(entry.path, "error.txt").read_bytes()
    return rows


def run(ctx: Context) -> None:
    """Measure and print the ``ingest`` table."""
    from statemachine.ingest.files import open_folder
    from statemachine.ingest.reader import read_experiment
    from statemachine.ingest.reconstruct import plan_ingest
    from statemachine.ingest.run import ingest_experiment
    from statemachine.log import EventStore, replay_experiment, verify
    from statemachine.log.bulk import collector_paused

    trials = ctx.size(1_000, 50)
    folder = ctx.workdir / EXPERIMENT
    view = make_experiment(folder, trials)
    rows = sum(len(p.read_bytes().splitlines()) for p in folder.glob("*/result.json"))
    assert raw_read(folder) == rows
    check = ctx.workdir / "check.db"
    result = ingest_experiment(str(folder), db=str(check))
    events = result.events_added
    with EventStore.open(check, create=False) as store:
        folded = {t: [r.state.status.value, r.state.failures]
                  for t, r in replay_experiment(store, EXPERIMENT).items()}
        assert folded == view, "the ingest disagrees with the generated folder"
        assert verify(store, EXPERIMENT).ok

    def read() -> None:
        with collector_paused():  # as ingest_experiment reads
            read_experiment(open_folder(str(folder)), lambda _: None)

    def plan() -> None:
        with collector_paused():
            ray = read_experiment(open_folder(str(folder)), lambda _: None)
            plan_ingest(ray, {}, frozenset(), now=time.time())

    def ingest() -> None:
        ingest_experiment(str(folder), db=str(ctx.workdir / f"{uuid.uuid4().hex}.db"))

    def again() -> None:
        assert ingest_experiment(str(folder), db=str(check)).epoch is None

    times = interleaved({"raw": lambda: raw_read(folder) and None, "read": read, "plan": plan,
                         "ingest": ingest, "again": again}, min(ctx.rounds, 3))
    stats = {name: per_unit(t, trials, 1e3) for name, t in times.items()}
    table = ctx.report.table(
        "ingest", f"Ingest a Ray folder of {trials:,} trials ({rows:,} results, {events:,} "
        "events recorded) into a new SQLite log", "ms/trial")
    base = stats["raw"]
    table.add("raw read: list, read and json-parse the same files (baseline)", base)
    table.add("read_experiment (parse into values; pickles scanned, never loaded)",
              stats["read"], versus=base)
    table.add("read + reconstruction (plan_ingest: events folded as they are made)",
              stats["plan"], versus=base)
    whole = stats["ingest"]
    table.add("trial-replay ingest into a new SQLite log (one transaction)", whole,
              versus=base, measured=f"{whole.median * trials / 1e3:.2f} s")
    table.add("the same folder again: nothing new (log read back, nothing written)",
              stats["again"], versus=base)
    table.note(f"{trials:,} trials ingest in {whole.median * trials / 1e3:.2f} s "
               f"({events / (whole.median * trials / 1e3):,.0f} events/s); every ingest "
               "agrees with the statuses and failure counts the generator wrote, and verifies "
               "(checked before timing).")
    ctx.report.print_table(table)
