"""Faults inside one Tune driver (one shared ``ray.init`` for the module).

The store fails under a real Tune run: PostgreSQL restarted, SQLite locked, the disk full.
Each of these runs a real Tune experiment (one shared ``ray.init`` for the module) with the
``EventLogCallback``, injects the fault from another thread or process while the trial trains,
lifts it a few seconds later, and ends with :func:`check_log`: every checkpoint and failure the
trainable really made is in the log exactly once, the log holds exactly the events the driver
folded, and ``verify`` (library and ``trial-replay verify``) passes.

Checkpoint deletion is safe: a real Tune ``Trial`` with real storage on disk is driven through
the ``EventLogCallback`` (``restart_from_scratch`` with ``delete_discarded_checkpoints``): its
own checkpoints are deleted; checkpoint paths the log was told about that lead elsewhere
(another trial's folder, a ``..`` path, a symlink leading out, the trial folder itself, a
look-alike sibling) are refused, logged one by one, and left exactly as they were, and the
log still verifies.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from tests.faults.fault_trainables import Steps, beats, checkpoint_iteration
from tests.faults.faultkit import (
    Figures,
    LogCount,
    captured,
    check_log,
    fill,
    under_ci_or_skip,
)

pytestmark = [pytest.mark.faults, pytest.mark.ray]

ITERS, SLEEP = 14, 0.3
OUTAGE_S = 3.0
AFTER = 3
#: Files in the control folder that hold the trial at an iteration while they exist.
HOLDS = {"hold-until-injected": AFTER + 1, "hold-until-lifted": ITERS}


class Fault(threading.Thread):
    """Once the trial has started ``after`` iterations: ``inject()``, wait, ``lift()``.

    The trial holds at iteration ``after + 1`` until the fault is in place (however long the
    injection takes, it trains during the fault) and at its last iteration until the fault is
    lifted (the run cannot end while the store is still failing).
    """

    def __init__(self, ctl: Path, inject: Callable[[], None], lift: Callable[[], None], *,
                 after: int = AFTER, seconds: float = OUTAGE_S) -> None:
        super().__init__(daemon=True)
        self.ctl, self.inject, self.lift = ctl, inject, lift
        self.after, self.seconds = after, seconds
        self.injected_at = self.lifted_at = 0.0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            deadline = time.monotonic() + 120
            while beats(self.ctl) < self.after:
                if time.monotonic() > deadline:
                    raise TimeoutError("the trial never trained")
                time.sleep(0.05)
            try:
                self.inject()
                self.injected_at = time.time()  # the fault is in place from here
                (self.ctl / "hold-until-injected").unlink()
                time.sleep(self.seconds)
            finally:
                self.lifted_at = time.time()  # ... until at least here
                try:
                    self.lift()
                finally:
                    for hold in HOLDS:
                        (self.ctl / hold).unlink(missing_ok=True)
        except BaseException as exc:  # reported by the test
            self.error = exc


def run_tune(tmp_path: Path, name: str, callback: Any) -> Any:
    """One trial of ``Steps``: a checkpoint every iteration, one failure at iteration 6,
    held by the files of :data:`HOLDS`."""
    from ray import tune

    from statemachine.tune import CheckpointConfig, FailureConfig, RunConfig

    ctl = tmp_path / "ctl"
    tuner = tune.Tuner(
        Steps,
        param_space={"ctl": str(ctl), "iters": ITERS, "sleep": SLEEP, "fail_at": [6],
                     "holds": HOLDS},
        run_config=RunConfig(
            name=name, storage_path=str(tmp_path / "results"), callbacks=[callback],
            verbose=0, failure_config=FailureConfig(max_failures=3),
            checkpoint_config=CheckpointConfig(checkpoint_frequency=1),
        ),
    )
    return tuner.fit()


def side_files(ctl: Path) -> dict[str, Counter[Any]]:
    """The checkpoints and failures the trainable really made."""
    return {
        "checkpoints": Counter(
            (p.name.split("-")[1], int(p.name.split("-")[2])) for p in ctl.glob("saved-*")
        ),
        "failures": Counter(p.name.split("-")[1] for p in ctl.glob("failed-*")),
    }


def stored_kinds(log: LogCount) -> dict[str, Counter[Any]]:
    """The same kinds as :func:`side_files`, read back from the log."""
    return {
        "checkpoints": Counter(
            (r.trial_id, checkpoint_iteration(r.event.checkpoint))
            for r in log.of_type("CheckpointSaved")
        ),
        "failures": Counter(r.trial_id for r in log.of_type("TrialFailed")),
    }


def outage_scenario(
    tmp_path: Path, name: str, url: str, callback: Any, fault: Fault, *, scenario: str,
    injected: str, reliability: Callable[[Figures], None],
) -> tuple[Figures, list[str]]:
    """Run Tune with ``fault`` injected, check that Tune went on and the log is whole.

    """
    (tmp_path / "ctl").mkdir()
    for hold in HOLDS:
        (tmp_path / "ctl" / hold).touch()
    with captured() as messages:
        fault.start()
        try:
            grid = run_tune(tmp_path, name, callback)
        finally:
            fault.join(timeout=120)
    assert fault.error is None, fault.error
    assert fault.lifted_at, "the fault was never injected"
    (trial,) = grid._experiment_analysis.trials
    assert (trial.status, trial.num_failures) == ("TERMINATED", 1), "Tune did not go on"
    assert grid[0].metrics["training_iteration"] == ITERS
    assert callback.write_failures >= 1, f"the fault never hit a write: {messages}"
    assert callback.events_unwritten == 0 and callback.events_rejected == 0
    assert callback.hook_errors == 0
    log_rows = check_log(
        url, name, scenario=scenario, injected=injected, times=1,
        expected=side_files(tmp_path / "ctl"), found=stored_kinds,
        shadow=dict(callback._recorder.states), reliability=reliability,
        details={"write_failures": callback.write_failures,
                 "outage_s": round(fault.lifted_at - fault.injected_at, 1)},
    )
    assert log_rows.events_written == callback.events_recorded
    return log_rows, messages


def written_late(url: str, name: str, fault: Fault, ctl: Path) -> int:
    """Checkpoints the trainable saved during the fault that the log recorded after it."""
    from statemachine.log import EventStore

    saved_at = {int(p.name.split("-")[2]): float(p.read_text()) for p in ctl.glob("saved-*")}
    with EventStore.open(url, create=False) as store:
        rows = [r for r in store.read_experiment(name) if r.type_name == "CheckpointSaved"]
    return sum(
        1 for r in rows
        if fault.injected_at < saved_at[checkpoint_iteration(r.event.checkpoint)]
        < fault.lifted_at <= r.recorded_at.timestamp()
    )


# ------------------------------------------------------------------ PostgreSQL restarted


def pg_cluster_command(pg_server_url: str) -> list[str]:
    """``pg_ctlcluster --skip-systemctl-redirect VERSION main`` for the test server, or skip."""
    tool = shutil.which("pg_ctlcluster")
    versions = sorted(os.listdir("/etc/postgresql")) if os.path.isdir("/etc/postgresql") else []
    url = make_url(pg_server_url)
    if tool is None or len(versions) != 1:
        under_ci_or_skip("cannot control the PostgreSQL server: no pg_ctlcluster or no "
                         "single cluster in /etc/postgresql")
    if url.host not in ("127.0.0.1", "localhost") or (url.port or 5432) != 5432:
        under_ci_or_skip(f"the test PostgreSQL server {url.host}:{url.port} is not the local "
                         "cluster this test can restart")
    if os.geteuid() != 0:
        under_ci_or_skip("stopping and starting PostgreSQL needs root")
    return [tool, "--skip-systemctl-redirect", versions[0], "main"]  # type: ignore[list-item]


@pytest.fixture
def pg_restart(pg_server_url: str) -> Iterator[tuple[Callable[[], None], Callable[[], None]]]:
    """``(stop, start)`` of the local PostgreSQL cluster; it is running again at the end."""
    command = pg_cluster_command(pg_server_url)

    def ctl(action: str) -> None:
        done = subprocess.run([*command, action], timeout=60, capture_output=True, text=True)
        if done.returncode:  # what pg_ctlcluster said (a broken /dev/null once made it fail)
            raise RuntimeError(f"{' '.join(command)} {action}: exit {done.returncode}: "
                               f"{done.stderr.strip()[-2000:]}")

    def running() -> bool:
        return subprocess.run(["pg_isready", "-h", "127.0.0.1", "-p", "5432", "-q"],
                              timeout=10).returncode == 0

    try:
        yield (lambda: ctl("stop")), (lambda: ctl("start"))
    finally:
        if not running():
            ctl("start")
        for _ in range(60):
            if running():
                break
            time.sleep(0.5)


@pytest.mark.postgres
def test_postgres_restarted_mid_run(
    ray_cluster: None, tmp_path: Path, pg_url: str, pg_restart: Any,
    reliability: Callable[[Figures], None],
) -> None:
    from statemachine.tune import EventLogCallback

    stop, start = pg_restart
    ctl = tmp_path / "ctl"
    fault = Fault(ctl, stop, start)
    callback = EventLogCallback(url=pg_url)
    figures, messages = outage_scenario(
        tmp_path, "pg-restart", pg_url, callback, fault, scenario="PostgreSQL restarted mid-run",
        injected="server stopped for 3 s (pg_ctlcluster stop/start) while the trial trains",
        reliability=reliability)
    assert any("WARNING" in m and "failed" in m and "queued" in m for m in messages), messages
    assert any("writable again" in m for m in messages), messages
    assert written_late(pg_url, "pg-restart", fault, ctl) >= 1
    assert figures.events_written > 0


# ------------------------------------------------------------------ SQLite locked

LOCKER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("LOCKED", flush=True)
sys.stdin.read()  # held until the test closes our stdin
conn.execute("COMMIT")
"""


def test_sqlite_locked_by_another_process(
    ray_cluster: None, tmp_path: Path, reliability: Callable[[Figures], None]
) -> None:
    from statemachine.tune import EventLogCallback

    db = tmp_path / "log" / "statemachine.db"
    url = f"sqlite:///{db}"
    holder: list[subprocess.Popen[str]] = []

    def lock() -> None:
        proc = subprocess.Popen([sys.executable, "-c", LOCKER, str(db)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        holder.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "LOCKED"

    def unlock() -> None:
        for proc in holder:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(timeout=30)

    ctl = tmp_path / "ctl"
    fault = Fault(ctl, lock, unlock)
    # The lock is held 3 s, ten times the busy timeout: writes wait, fail, and are retried.
    callback = EventLogCallback(url=url, busy_timeout_ms=300)
    _, messages = outage_scenario(
        tmp_path, "sqlite-locked", url, callback, fault, scenario="SQLite write-locked",
        injected="another process holds BEGIN IMMEDIATE for 3 s (busy timeout 0.3 s)",
        reliability=reliability)
    assert any("locked" in m for m in messages), messages
    assert any("writable again" in m for m in messages), messages
    assert written_late(url, "sqlite-locked", fault, ctl) >= 1


# ------------------------------------------------------------------ the disk fills


def test_disk_fills_up(
    ray_cluster: None, tmp_path: Path, small_disk: Path, reliability: Callable[[Figures], None]
) -> None:
    from statemachine.tune import EventLogCallback

    url = f"sqlite:///{small_disk / 'statemachine.db'}"
    ctl = tmp_path / "ctl"
    fault = Fault(ctl, lambda: fill(small_disk), lambda: (small_disk / "filler").unlink())
    callback = EventLogCallback(url=url)
    _, messages = outage_scenario(
        tmp_path, "disk-full", url, callback, fault, scenario="Disk full",
        injected="the log's 4 MiB tmpfs filled to the last byte for 3 s, then freed",
        reliability=reliability)
    assert any("disk is full" in m for m in messages), messages
    assert any("writable again" in m for m in messages), messages
    assert written_late(url, "disk-full", fault, ctl) >= 1


# ------------------------------------------------------------------ checkpoint deletion


def make_trial(tmp_path: Path, experiment: str) -> Any:
    """A real Tune trial stored under ``tmp_path/results``."""
    from ray.train._internal.storage import StorageContext
    from ray.tune.experiment import Trial

    storage = StorageContext(storage_path=str(tmp_path / "results"),
                             experiment_dir_name=experiment)
    trial = Trial("__fake", stub=True, storage=storage, max_failures=3)
    trial.init_local_path()
    return trial


def checkpoint_dir(folder: Path) -> str:
    """A checkpoint folder with a file in it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "state.json").write_text('{"i": 1}')
    return str(folder)


def tree(folder: Path) -> dict[str, str]:
    """Every file (following no link) under ``folder`` with its hash."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()}


def test_checkpoint_deletion_stays_inside_the_trial(
    ray_cluster: None, tmp_path: Path, reliability: Callable[[Figures], None]
) -> None:
    from ray.train import Checkpoint
    from ray.train._internal.session import _TrainingResult

    from statemachine.domain.policy import ExhaustionAction, RetryPolicy
    from statemachine.tune import EventLogCallback

    url = f"sqlite:///{tmp_path / 'log.db'}"
    policy = RetryPolicy(max_failures=3, restore_retry_num=0, delete_discarded_checkpoints=True,
                         on_restore_exhausted=ExhaustionAction.RESTART_FROM_SCRATCH)
    callback = EventLogCallback(url=url, policy=policy)
    callback.setup()
    trial = make_trial(tmp_path, "ckpt-safety")
    trial_dir = Path(trial.storage.trial_fs_path)
    neighbour = make_trial(tmp_path, "ckpt-safety")
    outside = tmp_path / "precious"
    checkpoint_dir(outside)
    theirs = checkpoint_dir(Path(neighbour.storage.trial_fs_path) / "checkpoint_000000")
    own = [checkpoint_dir(trial_dir / f"checkpoint_00000{i}") for i in range(2)]
    # A legitimate checkpoint that holds a symlink leading out: the link goes, not its target.
    (Path(own[0]) / "data").symlink_to(outside, target_is_directory=True)
    (trial_dir / "escape").symlink_to(outside, target_is_directory=True)
    hostile = {
        "another trial's checkpoint": theirs,
        "'..' in the path": f"{trial_dir}/../{Path(theirs).parent.name}/checkpoint_000000",
        "a symlink leading out": str(trial_dir / "escape"),
        "a path through that symlink": str(trial_dir / "escape" / "checkpoint_000000"),
        "the trial folder itself": str(trial_dir),
        "a look-alike sibling folder": checkpoint_dir(Path(f"{trial_dir}_x") / "checkpoint_0"),
        "a NUL in the path": f"{trial_dir}/checkpoint_000009\x00/../../x",
    }
    before = {name: tree(Path(path)) for name, path in
              [("outside", str(outside)), ("neighbour", str(Path(theirs).parent)),
               ("sibling", hostile["a look-alike sibling folder"])]}

    callback.on_step_begin(iteration=0, trials=[trial])
    with captured() as messages:
        try:
            callback.on_trial_start(iteration=0, trials=[trial], trial=trial)
            for path in own:
                trial.run_metadata.checkpoint_manager.register_checkpoint(
                    _TrainingResult(checkpoint=Checkpoint(path=path), metrics={}))
                callback.on_checkpoint(iteration=0, trials=[], trial=trial,
                                       checkpoint=Checkpoint(path=path))
            for path in hostile.values():  # the log is told of checkpoints it must not delete
                callback.on_checkpoint(iteration=0, trials=[], trial=trial,
                                       checkpoint=Checkpoint(path=path))
            trial.handle_error(RuntimeError("training failed"))
            callback.on_trial_start(iteration=0, trials=[trial], trial=trial)
            trial.temporary_state.restoring_from = trial.latest_checkpoint_result
            trial.handle_error(OSError("checkpoint unreadable"))  # retries 0: from scratch
        finally:
            callback.on_experiment_end(trials=[trial])

    for path in own:
        assert not Path(path).exists(), f"{path} (the trial's own) was not deleted"
    assert trial_dir.is_dir() and (trial_dir / "escape").is_symlink()
    assert {name: tree(Path(path)) for name, path in
            [("outside", str(outside)), ("neighbour", str(Path(theirs).parent)),
             ("sibling", hostile["a look-alike sibling folder"])]} == before
    refusals = [m for m in messages if "not deleting checkpoint" in m]
    for reason, path in hostile.items():
        assert any(path in m for m in refusals), (reason, refusals)
    assert len(refusals) == len(hostile)
    assert any("'..'" in m for m in refusals) and any("symlink" in m for m in refusals)
    assert any("not inside the trial directory" in m for m in refusals)
    assert any("NUL" in m for m in refusals)

    expected_paths = Counter([*own, *hostile.values()])

    def found(log: LogCount) -> dict[str, Counter[Any]]:
        (discarded,) = log.of_type("CheckpointsDiscarded")
        assert discarded.event.deleted is False  # not every folder could go
        return {"discarded": Counter(discarded.event.checkpoints)}

    check_log(
        url, "ckpt-safety", scenario="Checkpoint deletion",
        injected="restart_from_scratch with deletion, the log holding 7 paths that lead out "
                 "of the trial (other trial, '..', symlink out, through it, the trial folder, "
                 "a look-alike sibling, a NUL) beside the trial's own 2",
        times=len(hostile), expected={"discarded": expected_paths}, found=found,
        shadow=dict(callback._recorder.states), reliability=reliability,
        details={"deleted": len(own), "refused": len(refusals)},
    )
