"""Real Tune drivers killed and doubled: SIGKILL loops, and two drivers on one experiment.

Each driver is its own process (and process group, so a kill takes Ray's helpers with it)
running ``tests/faults/fault_driver.py``; the log is the default SQLite file in the
experiment folder. Every scenario ends with ``verify`` (library and ``trial-replay verify``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.faults.fault_trainables import beats, failures_that_happened, last_beat_iteration
from tests.faults.faultkit import REPO, Figures, LogCount, check_log, read_log, worker_pythonpath

pytestmark = [pytest.mark.faults, pytest.mark.ray, pytest.mark.slow]

KILLS = 5


class Driver:
    """One driver process; its output goes to ``log``."""

    def __init__(self, mode: str, storage: Path, name: str, config: dict[str, Any],
                 cpus: int, out: Path, log: Path, role: str = "") -> None:
        env = {**os.environ, "PYTHONPATH": worker_pythonpath(), "RAY_DEDUP_LOGS": "0",
               "TUNE_GLOBAL_CHECKPOINT_S": "0", "FAULT_DRIVER_ROLE": role}
        env.pop("STATEMACHINE_DB_URL", None)
        self.out, self.log = out, log
        with log.open("ab") as sink:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.faults.fault_driver", mode, str(storage), name,
                 json.dumps(config), str(cpus), str(out)],
                cwd=REPO, stdout=sink, stderr=subprocess.STDOUT, env=env,
                start_new_session=True,
            )

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the driver's whole process group."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=30)

    def finish(self, timeout: float) -> dict[str, Any]:
        """Wait for a normal end; its OUT_JSON."""
        try:
            self.process.wait(timeout=timeout)
        finally:
            self.kill()
        assert self.out.exists(), f"driver wrote no result:\n{self.tail()}"
        return json.loads(self.out.read_text())

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def wait_for(what: str, ready: Callable[[], bool], driver: Driver, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert driver.alive(), f"driver ended before {what}:\n{driver.tail()}"
        assert time.monotonic() < deadline, f"no {what} in {timeout} s:\n{driver.tail()}"
        time.sleep(0.05)


def restorable(experiment: Path) -> bool:
    """Ray has written the experiment state ``Tuner.restore`` needs."""
    return any(experiment.glob("experiment_state*.json"))


def set_aside_torn_state(experiment: Path) -> str | None:
    """Rename Ray's newest experiment state away if a kill left it torn; its name, or None.

    Ray rewrites ``experiment_state-*.json`` in place (truncate, then write), so a SIGKILL in
    that moment leaves it empty and ``Tuner.restore`` then restarts the experiment from
    nothing. What a user does (docs/tune.md, "Killed drivers: a torn experiment state"): move
    the torn file away, so Ray restores from the newest intact one; the log's counts then
    replace Ray's older ones.
    """
    states = sorted(experiment.glob("experiment_state-*.json"))
    if not states:
        return None
    try:
        json.loads(states[-1].read_text())
    except ValueError:
        states[-1].rename(states[-1].with_name(states[-1].name + ".torn"))
        return states[-1].name
    return None


def sessions_of(db: Path, experiment: str) -> int:
    """How many driver sessions the log holds for ``experiment`` (0 before it exists)."""
    from statemachine.exceptions import StoreError
    from statemachine.log import EventStore

    if not db.exists():
        return 0
    try:
        with EventStore.open(db, create=False) as store:
            return len(store.list_sessions(experiment))
    except StoreError:  # not migrated yet, or no such experiment yet
        return 0


def test_kill_minus_nine_loop(tmp_path: Path, reliability: Callable[[Figures], None]) -> None:
    seed = int(os.environ.get("STATEMACHINE_FAULT_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    ctl, storage, name = tmp_path / "ctl", tmp_path / "results", "killed"
    ctl.mkdir()
    # Iteration 1 fails before the first kill can happen (a kill waits for a training step
    # to start, which the failed actor never does): budgets must survive every kill after it.
    config = {"ctl": str(ctl), "iters": 12, "sleep": 0.3, "fail_at": [1, 4, 8]}
    log = tmp_path / "drivers.log"
    kills: list[dict[str, Any]] = []
    driver: Driver | None = None
    try:
        for k in range(KILLS):
            torn = set_aside_torn_state(storage / name) if k else None
            driver = Driver("fit" if k == 0 else "restore", storage, name, config, 2,
                            tmp_path / f"out-{k}.json", log)
            # A step whose next iteration does not fail: even a kill that comes late (a
            # loaded machine) cannot fall between a failure and the driver recording it.
            target = beats(ctl) + rng.randint(1, 2)
            wait_for(f"step {target}", lambda t=target: beats(ctl) >= t
                     and last_beat_iteration(ctl) + 1 not in config["fail_at"], driver)
            wait_for("the experiment state", lambda: restorable(storage / name), driver)
            # Somewhere inside the step (it sleeps 0.3 s; the next step, which may fail, is
            # only asked for once the driver handled this one's result).
            delay = rng.uniform(0.0, 0.2)
            time.sleep(delay)
            assert driver.alive(), f"the run ended before kill {k + 1}:\n{driver.tail()}"
            driver.kill()
            kills.append({"after_beats": beats(ctl), "delay_s": round(delay, 3)})
            if torn:
                kills[-2]["tore_rays_state"] = torn
        if torn := set_aside_torn_state(storage / name):
            kills[-1]["tore_rays_state"] = torn
        driver = Driver("restore", storage, name, config, 2, tmp_path / "out-final.json", log)
        result = driver.finish(timeout=240)
    finally:
        if driver is not None:
            driver.kill()

    happened = failures_that_happened(ctl)
    (trial_id, (status, ray_failures)), = result["ray"].items()
    assert status == "TERMINATED", driver.tail()
    assert sum(happened.values()) == 3 and ray_failures == happened[trial_id]
    assert result["summary"]["unwritten"] == 0 and result["summary"]["rejected"] == 0
    url = f"sqlite:///{storage / name / 'statemachine.db'}"

    def found(rows: LogCount) -> dict[str, Counter[Any]]:
        return {"failures": Counter(r.trial_id for r in rows.of_type("TrialFailed"))}

    figures = check_log(
        url, name, scenario="Driver SIGKILLed and resumed",
        injected=f"kill -9 of the Tune driver's process group at a random moment of a "
                 f"training step, then Tuner.restore (seed {seed}); failures raised "
                 f"{sum(happened.values())}, counted {ray_failures}",
        times=KILLS, expected={"failures": Counter(happened)}, found=found,
        reliability=reliability, details={"seed": seed, "kills": kills,
                                          "failures": sum(happened.values())},
    )
    from statemachine.domain.machine import fold
    from statemachine.log import EventStore

    rows = read_log(url, name).rows
    final = fold(trial_id, [r.event for r in rows])[0]
    assert next(r.epoch for r in rows if r.type_name == "TrialFailed") == 1
    assert (final.status.value, final.failures) == ("TERMINATED", happened[trial_id])
    with EventStore.open(url, create=False) as store:
        sessions = store.list_sessions(name)
    assert [s.epoch for s in sessions] == list(range(1, KILLS + 2))
    assert [s.clean_end for s in sessions] == [None] * KILLS + [True]
    assert figures.events_written == len(rows)


def test_two_drivers_resume_the_same_experiment(
    tmp_path: Path, reliability: Callable[[Figures], None]
) -> None:
    ctl, storage, name = tmp_path / "ctl", tmp_path / "results", "doubled"
    ctl.mkdir()
    # From iteration 3 on each driver's trial waits while its hold file exists: the older
    # driver is still training when the newer one takes the experiment over, however slow the
    # machine. The two trainings then run one after the other: run together, they would write
    # the same checkpoint folders at once (Ray's files are not fenced, only the log is) and a
    # torn checkpoint could fail the newer driver's trial for a reason this test is not about.
    (ctl / "hold-older").touch()
    (ctl / "hold-newer").touch()
    config = {"ctl": str(ctl), "iters": 8, "sleep": 0.2, "fail_at": [],
              "holds": {"hold-{role}": 3}}
    db = storage / name / "statemachine.db"
    older = newer = None
    try:
        older = Driver("fit", storage, name, config, 1, tmp_path / "older.json",
                       tmp_path / "older.log", role="older")
        wait_for("iteration 2", lambda: beats(ctl) >= 2, older)
        wait_for("the experiment state", lambda: restorable(storage / name), older)
        newer = Driver("restore", storage, name, config, 1, tmp_path / "newer.json",
                       tmp_path / "newer.log", role="newer")
        wait_for("the newer driver's session", lambda: sessions_of(db, name) >= 2, newer)
        (ctl / "hold-older").unlink()
        first = older.finish(timeout=180)
        (ctl / "hold-newer").unlink()
        second = newer.finish(timeout=180)
    finally:
        for driver in (older, newer):
            if driver is not None:
                driver.kill()
    assert older is not None and newer is not None

    # The older driver is fenced out and says so; Tune went on in both.
    fenced = [m for m in first["messages"] if "newer driver took over" in m]
    assert fenced and fenced[0].startswith("ERROR"), first["messages"]
    assert first["summary"]["unwritten"] > 0, first["summary"]
    assert [s for s, _ in first["ray"].values()] == ["TERMINATED"], (first, older.tail())
    assert [s for s, _ in second["ray"].values()] == ["TERMINATED"], (second, newer.tail())
    assert second["summary"]["unwritten"] == 0 and second["summary"]["rejected"] == 0
    # What the fenced driver could not write is refused (saved to its file), not merged.
    (saved,) = (storage / name).glob("statemachine-unwritten-*.jsonl")
    assert len(saved.read_text().splitlines()) == first["summary"]["unwritten"]

    url = f"sqlite:///{storage / name / 'statemachine.db'}"
    from statemachine.log import EventStore

    rows = read_log(url, name).rows
    with EventStore.open(url, create=False) as store:
        sessions = store.list_sessions(name)
    assert [s.epoch for s in sessions] == [1, 2]
    assert sessions[0].clean_end is False and sessions[1].clean_end is True
    # Never interleaved: every row of the older driver precedes every row of the newer one.
    older_rows = [r for r in rows if r.epoch == 1]
    newer_rows = [r for r in rows if r.epoch == 2]
    assert older_rows and newer_rows
    assert max(r.position for r in older_rows) < min(r.position for r in newer_rows)
    assert all(r.recorded_at <= sessions[1].started_at for r in older_rows)

    def found(log: LogCount) -> dict[str, Counter[Any]]:
        epochs = Counter(r.epoch for r in log.rows)
        return {f"epoch {e}": Counter({e: n}) for e, n in epochs.items()}

    check_log(
        url, name, scenario="Two drivers on one experiment",
        injected=f"a second driver runs Tuner.restore while the first still trains; the "
                 f"fenced driver's {first['summary']['unwritten']} later events refused "
                 "(saved to its unwritten file), none in the log",
        times=1,
        expected={"epoch 1": Counter({1: first["summary"]["recorded"]}),
                  "epoch 2": Counter({2: second["summary"]["recorded"]})},
        found=found, reliability=reliability,
        details={"refused_from_fenced_driver": first["summary"]["unwritten"]},
    )
