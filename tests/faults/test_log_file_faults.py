"""The log's own file goes away or cannot grow: no event is lost silently.

- A SQLite log deleted, renamed or replaced while a driver writes it (issue 23, item 2): the
  next write says so (``LogFileLostError``), once and loudly in a Tune run, and every event
  from then on is kept in the dead-letter file (``statemachine-unwritten-<pid>.jsonl``);
  the run's summary counts as recorded only what went into the log.
- The disk holding the log fills up and stays full (kept from the red-team pass): through the
  API nothing is half-written and the log verifies; in a Tune run the events end in the
  dead-letter file and the log verifies.

The Tune runs share one ``ray.init`` for the module and use the trainable and fault thread
of ``test_tune_faults.py``.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statemachine import CheckpointSaved, RetryPolicy, TrialAdded, TrialStarted, decode_event
from statemachine.domain.machine import fold
from statemachine.exceptions import LogFileLostError, StoreError
from statemachine.log import EventStore, ExperimentLog, verify
from statemachine.tune.recorder import Recorder
from tests.faults.fault_trainables import checkpoint_iteration
from tests.faults.faultkit import Figures, LogCount, captured, check_log, fill, read_log
from tests.faults.test_tune_faults import HOLDS, Fault, run_tune, side_files

pytestmark = [pytest.mark.faults]
POLICY = RetryPolicy(max_failures=3)


def record_some(log: ExperimentLog, trial: str = "t1") -> None:
    log.record(trial, TrialAdded(config={"lr": 0.1}))
    log.record(trial, TrialStarted())
    log.record(trial, CheckpointSaved(f"{trial}/c0"))


def events_of(path: Path, experiment: str = "exp") -> list[Any]:
    with EventStore.open(path, create=False) as store:
        return list(store.read_experiment(experiment))


# ------------------------------------------------------------------ issue 23, item 2: API


@pytest.mark.parametrize("how", ["deleted", "renamed", "replaced"])
def test_a_log_file_lost_while_open_is_noticed_at_the_next_write(
    tmp_path: Path, how: str
) -> None:
    path = tmp_path / "statemachine.db"
    log = ExperimentLog.open(path, "exp", POLICY)
    record_some(log)
    before = log.state("t1")
    moved, other = tmp_path / "moved.db", tmp_path / "other.db"
    if how == "deleted":
        path.unlink()
    elif how == "renamed":
        path.rename(moved)
    else:  # another log put in its place
        with ExperimentLog.open(other, "someone else's", POLICY) as theirs:
            record_some(theirs, "x1")
        other_events = events_of(other, "someone else's")
        os.replace(other, path)

    with pytest.raises(LogFileLostError) as lost:
        log.record("t1", CheckpointSaved("t1/c1"))
    message = str(lost.value)
    assert "\n" not in message and str(path) in message
    assert ("replaced by another file" if how == "replaced" else "deleted or moved away") \
        in message
    assert log.state("t1") == before, "an event not in the log changed the state"
    with pytest.raises(LogFileLostError):
        log.close()  # its end of session went to the lost file too: said, not hidden

    if how == "renamed":
        # The moved file is whole (what the write-ahead log held was put into it) and
        # verifies, with the write that found the loss as its last event.
        rows = events_of(moved)
        assert [r.type_name for r in rows if r.trial_id == "t1"][-1] == "CheckpointSaved"
        assert rows[-1].event.checkpoint == "t1/c1"
        with EventStore.open(moved, create=False) as store:
            assert verify(store, "exp").ok
    if how == "replaced":
        # The file put there is untouched: none of this log's frames were replayed into it.
        assert events_of(path, "someone else's") == other_events
        with EventStore.open(path, create=False) as store:
            assert [e.name for e in store.list_experiments()] == ["someone else's"]
            assert verify(store, "someone else's").ok
    if how == "deleted":
        assert not path.exists()
    wal = path.with_name(path.name + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0, "frames left to replay into a new file"


# ------------------------------------------------------------------ issue 23, item 2: Tune


def dead_letters(folder: Path) -> list[dict[str, Any]]:
    """The events of the one dead-letter file in ``folder``."""
    (saved,) = folder.glob("statemachine-unwritten-*.jsonl")
    return [json.loads(line) for line in saved.read_text(encoding="utf-8").splitlines()]


def test_a_log_deleted_during_a_tune_run_keeps_every_later_event(
    ray_cluster: None, tmp_path: Path, reliability: Callable[[Figures], None]
) -> None:
    from statemachine.tune import EventLogCallback

    db = tmp_path / "log" / "statemachine.db"
    ctl = tmp_path / "ctl"
    ctl.mkdir()
    for hold in HOLDS:
        (ctl / hold).touch()
    fault = Fault(ctl, db.unlink, lambda: None, seconds=0.0)
    callback = EventLogCallback(url=f"sqlite:///{db}")
    with captured() as messages:
        fault.start()
        try:
            grid = run_tune(tmp_path, "deleted", callback)
        finally:
            fault.join(timeout=120)
    assert fault.error is None, fault.error
    (trial,) = grid._experiment_analysis.trials
    assert (trial.status, trial.num_failures) == ("TERMINATED", 1), "Tune did not go on"

    lost = [m for m in messages if "was deleted or moved away" in m and "unwritten" in m]
    assert len(lost) == 1 and lost[0].startswith("ERROR: "), messages  # once, loudly
    summary = callback.summary()
    dead = dead_letters(tmp_path / "results" / "deleted")
    assert len(dead) == summary["unwritten"] > 0
    shadow = callback._recorder.states  # every event the driver folded
    folded = sum(state.seq for state in shadow.values())
    ids = Counter(d["event_id"] for d in dead)
    duplicates = sum(n - 1 for n in ids.values())
    # Each event is either one recorded into the log before it went, or in the dead letters.
    lost_events = folded - summary["recorded"] - len(ids)
    # Every checkpoint and the failure after the deletion are among the dead letters.
    after = {int(p.name.split("-")[2]) for p in ctl.glob("saved-*")
             if float(p.read_text()) > fault.injected_at}
    kept = {checkpoint_iteration(d["payload"]["checkpoint"]) for d in dead
            if d["type"] == "CheckpointSaved"}
    assert after and after <= kept, (after, kept)
    assert "TrialFailed" in {d["type"] for d in dead}
    assert not db.exists(), "a new log was started at the path"
    reliability(Figures(
        scenario="Log file deleted mid-run",
        injected="the Tune run's SQLite log deleted (rm) while the trial trains; "
                 f"{summary['recorded']} events were written to it before",
        times=1, events_written=summary["recorded"], events_lost=lost_events,
        duplicates=duplicates,
        verify=f"said once (ERROR); every later event ({len(dead)}) in the dead-letter file, "
               "the summary's recorded count only what the log got",
        details={"summary": summary, "checkpoints_after": sorted(after)},
    ))
    assert (lost_events, duplicates) == (0, 0), summary


# ------------------------------------------------------------------ the disk fills


def test_a_full_disk_through_the_api_writes_nothing_half_and_the_log_verifies(
    small_disk: Path, tmp_path: Path, reliability: Callable[[Figures], None]
) -> None:
    path = small_disk / "statemachine.db"
    log = ExperimentLog.open(path, "exp", POLICY)
    record_some(log)
    fill(small_disk)
    state = log.state("t1")
    for i in range(1, 4):
        with pytest.raises(StoreError, match="disk is full"):
            log.record("t1", CheckpointSaved(f"t1/c{i}"))
        assert log.state("t1") == state
    # The recorder (what the Tune callback writes through) keeps such events: dead letters.
    recorder = Recorder(lambda: log, POLICY, attempts=1, backoff_s=0.0, cooldown_s=0.0)
    assert recorder.open()
    for i in range(1, 4):
        assert recorder.record("t1", CheckpointSaved(f"t1/c{i}")) is not None
    assert recorder.flush(force=True) == 3
    saved = recorder.save_unwritten(tmp_path / "unwritten.jsonl")
    assert saved is not None
    dead = [json.loads(line) for line in saved.read_text().splitlines()]
    assert [d["payload"]["checkpoint"] for d in dead] == ["t1/c1", "t1/c2", "t1/c3"]
    (small_disk / "filler").unlink()
    log.record("t1", CheckpointSaved("t1/c4"))  # the same log goes on once there is room
    log.close()

    def found(rows: LogCount) -> dict[str, Counter[Any]]:
        return {"checkpoints": Counter(r.event.checkpoint for r in rows.of_type("CheckpointSaved"))}

    check_log(
        f"sqlite:///{path}", "exp", scenario="Disk full through the API",
        injected="the log's 4 MiB tmpfs filled to the last byte: 3 ExperimentLog.record calls "
                 "and 3 recorder events refused, then the disk freed",
        times=6, expected={"checkpoints": Counter(["t1/c0", "t1/c4"])}, found=found,
        reliability=reliability, details={"dead_letters": len(dead)},
    )


def test_a_disk_full_to_the_end_of_a_tune_run_keeps_the_events_in_the_dead_letter_file(
    ray_cluster: None, tmp_path: Path, small_disk: Path, reliability: Callable[[Figures], None]
) -> None:
    from statemachine.tune import EventLogCallback

    db = small_disk / "statemachine.db"
    ctl = tmp_path / "ctl"
    ctl.mkdir()
    for hold in HOLDS:
        (ctl / hold).touch()
    fault = Fault(ctl, lambda: fill(small_disk), lambda: None, seconds=0.0)
    callback = EventLogCallback(url=f"sqlite:///{db}")
    with captured() as messages:
        fault.start()
        try:
            grid = run_tune(tmp_path, "full-to-the-end", callback)
        finally:
            fault.join(timeout=120)
    assert fault.error is None, fault.error
    (trial,) = grid._experiment_analysis.trials
    assert (trial.status, trial.num_failures) == ("TERMINATED", 1), "Tune did not go on"
    assert any("disk is full" in m for m in messages), messages
    dead = dead_letters(tmp_path / "results" / "full-to-the-end")
    assert len(dead) == callback.events_unwritten > 0
    (small_disk / "filler").unlink()  # room again, to read the log

    # The log and the dead letters together hold every event the driver folded, each once,
    # in order: the log a prefix of each trial's events, the dead letters the rest.
    rows = read_log(f"sqlite:///{db}", "full-to-the-end").rows
    shadow = callback._recorder.states
    for trial_id, state in shadow.items():
        events = [r.event for r in rows if r.trial_id == trial_id] + [
            decode_event(d["type"], d["version"], d["payload"])
            for d in dead if d["trial_id"] == trial_id]
        assert fold(trial_id, events)[0].to_dict() == state.to_dict(), trial_id
    assert not {r.event_id for r in rows} & {d["event_id"] for d in dead}

    def found(log: LogCount) -> dict[str, Counter[Any]]:
        return {"checkpoints": Counter(
            (r.trial_id, checkpoint_iteration(r.event.checkpoint))
            for r in log.of_type("CheckpointSaved")) + Counter(
            (d["trial_id"], checkpoint_iteration(d["payload"]["checkpoint"]))
            for d in dead if d["type"] == "CheckpointSaved")}

    check_log(
        f"sqlite:///{db}", "full-to-the-end", scenario="Disk full to the end of a run",
        injected="the log's 4 MiB tmpfs filled to the last byte while the trial trains, and "
                 f"kept full until Tune ended; {len(dead)} events saved to the dead-letter file",
        times=1, expected={"checkpoints": side_files(ctl)["checkpoints"]}, found=found,
        reliability=reliability,
        details={"dead_letters": len(dead), "in_log": len(rows),
                 "write_failures": callback.write_failures},
    )
