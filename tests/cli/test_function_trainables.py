"""``explain`` and ``what-if --restore-phase`` on the log of a function trainable whose own
checkpoint load failed (as the callback records it under each policy)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path

from statemachine.domain.events import (
    CheckpointSaved,
    Event,
    FirstResult,
    RestoreSucceeded,
    TrialAdded,
    TrialCompleted,
    TrialFailed,
    TrialStarted,
)
from statemachine.domain.failures import RestoreError, TrainingError
from statemachine.domain.policy import RetryPolicy
from statemachine.log import ExperimentLog
from tests.cli.conftest import Run

CKPT = "/r/fn/trial_f/checkpoint_000000"
LOAD_FAILED = "checkpoint load attempt 1 failed"


def _log(path: Path, events: list[Event]) -> Path:
    log = ExperimentLog.open(f"sqlite:///{path}", "fn", RetryPolicy(max_failures=1,
                                                                   restore_retry_num=2))
    try:
        for event in events:
            log.record("f", event)
    finally:
        log.close()
    return path


def _restarted() -> list[Event]:
    """Reported, checkpointed, failed in training, restarted: Ray's restore returned."""
    return [TrialAdded(), TrialStarted(), FirstResult(iteration=1), CheckpointSaved(CKPT),
            TrialFailed(TrainingError("builtins.ValueError", "training failed")),
            TrialStarted(restore_from=CKPT), RestoreSucceeded()]


def _steps(invoke: Callable[..., Run], db: Path) -> list[str]:
    run = invoke("--db", db, "explain", "fn", "f", "--json")
    assert run.exit_code == 0, run.stderr
    return [step["text"] for step in json.loads(run.stdout)["steps"]]


def test_explain_words_a_failed_load_inside_restoring_as_a_restore_failure(
    invoke: Callable[..., Run], tmp_path: Path
) -> None:
    again = [TrialStarted(restore_from=CKPT), RestoreSucceeded()]
    events = [*_restarted(),
              TrialFailed(RestoreError("builtins.OSError", LOAD_FAILED)), *again,
              TrialFailed(RestoreError("builtins.OSError", "attempt 2 failed")), *again,
              FirstResult(iteration=2), TrialCompleted()]
    steps = _steps(invoke, _log(tmp_path / "a.db", events))
    text = "\n".join(steps)
    assert "Restore failure # 1 (retry 1 of 2)" in text
    assert "Restore failure # 2 (retry 2 of 2)" in text
    assert "restore again from checkpoint_000000" in text
    # No "restored; the counter goes back to 0" before a failure of the user's restore.
    for before, failure in itertools.pairwise(steps):
        if "Restore failure" in failure:
            assert "goes back to 0" not in before, before
            assert "the trainable's own load of it is still part of the restore" in before
    assert "First result of this attempt (iteration 2): the restore from checkpoint_000000 " \
           "worked." in text


def test_explain_and_what_if_on_a_failed_load_under_rays_rules(
    invoke: Callable[..., Run], tmp_path: Path
) -> None:
    db = _log(tmp_path / "b.db", [
        *_restarted(), TrialFailed(TrainingError("builtins.OSError", LOAD_FAILED))])
    last = _steps(invoke, db)[-1]
    assert last.startswith("Training failure: TrainingError (builtins.OSError")
    assert "restoring() or restore_phase=until_first_report makes it a restore failure" in last
    run = invoke("--db", db, "what-if", "fn", "--restore-phase", "until_first_report", "--json")
    assert run.exit_code == 0, run.stderr
    (row,) = json.loads(run.stdout)["trials"]
    assert (row["recorded"]["status"], row["recorded"]["num_failures"]) == ("ERROR", 2)
    assert row["hypothetical"]["last_decision"] == "RETRY_RESTORE"
    assert (row["hypothetical"]["status"], row["hypothetical"]["num_failures"]) == ("PENDING", 1)
    assert row["changed"] is True
    table = invoke("--db", db, "what-if", "fn", "--restore-phase", "until_first_report")
    assert "restore_phase=until_first_report" in table.stdout
    bad = invoke("--db", db, "what-if", "fn", "--restore-phase", "sometimes")
    assert bad.exit_code == 2 and "sometimes" in bad.stderr


def test_what_if_says_when_the_log_has_no_first_results(
    invoke: Callable[..., Run], tmp_path: Path
) -> None:
    """A log written before FirstResult events existed."""
    events = [e for e in _restarted() if not isinstance(e, FirstResult)]
    db = _log(tmp_path / "c.db", [
        *events, TrialFailed(TrainingError("builtins.KeyError", "bug"))])
    run = invoke("--db", db, "what-if", "fn", "--restore-phase", "until_first_report", "--json")
    (row,) = json.loads(run.stdout)["trials"]
    assert "records no first result" in row["note"]


def test_explain_names_a_checkpoint_whose_number_started_over_after_the_restore(
    invoke: Callable[..., Run], tmp_path: Path
) -> None:
    """When Ray's checkpoint numbering goes back (a restore that starts again at
    checkpoint_000000), the newest checkpoint is worded with its iteration and the one it is
    newer than, not as if training had gone back to the first checkpoint."""
    path = "/r/fn/trial_f/checkpoint_{:06d}".format
    saved = [CheckpointSaved(path(n), iteration=n + 1) for n in range(4)]
    events = [TrialAdded(), TrialStarted(), FirstResult(iteration=1), *saved,
              TrialFailed(TrainingError("builtins.ValueError", "training failed")),
              TrialStarted(restore_from=path(3)), RestoreSucceeded(), FirstResult(iteration=5),
              CheckpointSaved(path(0), iteration=5), CheckpointSaved(path(1), iteration=6),
              TrialCompleted()]
    steps = _steps(invoke, _log(tmp_path / "n.db", events))
    assert "Saved checkpoint_000003." in steps  # before the restart: as always
    assert steps[-3:-1] == [
        f"Saved checkpoint_00000{n} at training_iteration {n + 5} (Ray's numbering started "
        "over: this is newer than checkpoint_000003)."
        for n in (0, 1)]
