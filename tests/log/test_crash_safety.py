"""Crash safety: a recording driver is SIGKILLed at random moments, again and again.

After every kill the store opens; every append the child saw acknowledged is there, nothing
else is except the one append in flight (whole or not at all), every row decodes and folds to
what it recorded, and the fold of the acknowledged events equals the rehydrated state.

Most kills wait until the child has had a random number of appends acknowledged (then a
random moment more): the kills certainly land while it records, however fast the machine.
The others land at a random time from the start (imports, migration, session start).
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from statemachine import decode_event, fold
from statemachine.log import EventStore, rehydrate, replay_experiment, verify

CHILD = Path(__file__).with_name("crash_child.py")
REPO = Path(__file__).resolve().parents[2]
KILLS = 20


class Child:
    """The child process and the lines it printed (read by a thread)."""

    def __init__(self, url: str, seed: int) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(CHILD), url, str(seed)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self.ready = threading.Event()
        self._acked = threading.Condition()
        self.acks = 0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if not line.endswith("\n"):
                break  # cut by the kill: not a complete line
            self.lines.append(line.rstrip("\n"))
            if line.startswith("READY"):
                self.ready.set()
            elif line == "A\n":
                with self._acked:
                    self.acks += 1
                    self._acked.notify_all()

    def wait_for_acks(self, count: int, timeout: float) -> bool:
        """Wait until ``count`` appends were acknowledged (False: not within ``timeout``)."""
        with self._acked:
            return self._acked.wait_for(lambda: self.acks >= count, timeout=timeout)

    def kill(self) -> str:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)
        self._reader.join(timeout=30)
        assert self.process.stderr is not None
        return self.process.stderr.read()


def _crash_loop(url: str, seed: int) -> None:
    rng = random.Random(seed)
    acked: dict[str, list] = {}  # event id -> [trial, type, version, payload], in ack order
    acked_order: list[str] = []
    waited_for = 0  # acknowledgements the test waited for before its kills
    for run in range(KILLS):
        child = Child(url, rng.randrange(2**31))
        if rng.random() < 0.8:
            acks = rng.randint(1, 30)
            assert child.wait_for_acks(acks, timeout=120), "the child did not record"
            waited_for += acks
            time.sleep(rng.uniform(0.0, 0.3))
        else:
            time.sleep(rng.uniform(0.0, 1.2))  # during imports, migration or session start
        assert child.process.poll() is None, f"the child died by itself:\n{child.kill()}"
        stderr = child.kill()
        assert "Traceback" not in stderr, stderr
        in_flight: dict[str, list] = {}
        for line in child.lines:
            if line.startswith("I "):
                intent = json.loads(line[2:])
                in_flight = dict(zip(intent["ids"], intent["events"], strict=True))
            elif line == "A":
                acked.update(in_flight)
                acked_order += in_flight
                in_flight = {}

        with EventStore.open(url) as store:  # as the next driver would
            if "crash" not in {e.name for e in store.list_experiments()}:
                assert not acked, f"run {run}: acknowledged events vanished with the experiment"
                continue
            stored = list(store.read_experiment("crash"))
            stored_ids = {s.event_id for s in stored}
            missing = set(acked) - stored_ids
            assert not missing, f"run {run}: acknowledged events lost: {sorted(missing)[:3]}"
            extra = stored_ids - set(acked)
            assert extra <= set(in_flight), f"run {run}: unknown events stored: {extra}"
            committed = bool(extra)
            assert not committed or extra == set(in_flight), f"run {run}: half a batch stored"
            if committed:  # committed, but killed before the acknowledgement was printed
                acked.update(in_flight)
                acked_order += in_flight
            result = verify(store, "crash")
            assert result.ok, f"run {run}: {result}"
            states = rehydrate(store, "crash")
            assert states == {t: r.state for t, r in replay_experiment(store, "crash").items()}

        by_trial: dict[str, list] = {}
        for event_id in acked_order:
            trial, type_name, version, payload = acked[event_id]
            by_trial.setdefault(trial, []).append(decode_event(type_name, version, payload))
        folded = {trial: fold(trial, evs)[0] for trial, evs in by_trial.items()}
        assert folded == states, f"run {run}: the fold of acknowledged events differs"
    assert len(acked) >= waited_for  # each waited-for acknowledgement, checked in the log


def test_sigkill_sqlite_at_random_moments(sqlite_url: str) -> None:
    _crash_loop(sqlite_url, seed=20261129)


@pytest.mark.postgres
def test_sigkill_postgres_at_random_moments(pg_url: str) -> None:
    _crash_loop(pg_url, seed=11292026)
