"""Parts of the Tune integration that need no Ray cluster: versions, paths, the error file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from statemachine.domain.failures import RestoreError, TrainingError
from statemachine.domain.machine import TransitionRecord
from statemachine.domain.policy import RetryPolicy
from statemachine.domain.state import Counters
from statemachine.domain.status import Decision, Status
from statemachine.tune.checkpoints import refusal
from statemachine.tune.compat import UnsupportedRayError, check_version
from statemachine.tune.errorfile import rewrite_last_header


@pytest.mark.parametrize("version", ["2.40.0", "2.60.0", "2.99.1rc1"])
def test_supported_ray_versions(version: str) -> None:
    check_version(version)


@pytest.mark.parametrize("version", ["1.13.0", "2.9.3", "3.0.0", "nightly"])
def test_unsupported_ray_versions_are_refused_with_the_fix(version: str) -> None:
    with pytest.raises(UnsupportedRayError) as info:
        check_version(version)
    message = str(info.value)
    assert version in message or "cannot read" in message
    if "cannot read" not in message:
        assert "pip install" in message and "2.60" in message


def record(decision: Decision, error: object, counters: Counters) -> TransitionRecord:
    return TransitionRecord("t1", "TrialFailed", Status.RESTORING, Status.PENDING, decision,
                            counters, error)  # type: ignore[arg-type]


def test_error_file_tells_restore_retries_from_failures(tmp_path: Path) -> None:
    file = tmp_path / "error.txt"
    ray_text = "Failure # 1 (occurred at 2026-01-01_10-00-00)\nValueError: boom\n"
    file.write_text(ray_text)
    policy = RetryPolicy(max_failures=2, restore_retry_num=2)
    assert rewrite_last_header(file, record(Decision.RECOVER, TrainingError("builtins.ValueError",
                               "boom"), Counters(1, 0, 0, 0)), policy)
    # Ray appends its next failure (its own count), the seam rewrites only that header.
    with file.open("a") as out:
        out.write("Failure # 2 (occurred at 2026-01-01_10-00-05)\nOSError: gone\n")
    assert rewrite_last_header(file, record(Decision.RETRY_RESTORE, RestoreError(
        "builtins.OSError", "gone"), Counters(1, 1, 1, 0)), policy)
    lines = file.read_text().splitlines()
    assert lines == [
        "Failure # 1 (occurred at 2026-01-01_10-00-00) [TrainingError; decision RECOVER]",
        "ValueError: boom",
        "Restore failure # 1 (retry 1 of 2) (occurred at 2026-01-01_10-00-05)",
        "OSError: gone",
    ]
    assert not rewrite_last_header(tmp_path / "missing.txt", record(
        Decision.RECOVER, None, Counters(1, 0, 0, 0)), policy)


def test_checkpoint_deletion_refuses_paths_outside_the_trial(tmp_path: Path) -> None:
    trial = tmp_path / "exp" / "trial_1"
    inside = trial / "checkpoint_000000"
    inside.mkdir(parents=True)
    outside = tmp_path / "precious"
    outside.mkdir()
    (trial / "escape").symlink_to(outside, target_is_directory=True)
    assert refusal(str(inside), str(trial), local=True) is None
    assert "'..'" in refusal(f"{trial}/../trial_2/checkpoint_000000", str(trial), True)
    assert "not inside" in refusal(str(outside), str(trial), True)
    assert "not inside" in refusal(str(trial), str(trial), True)
    assert "not inside" in refusal(f"{trial}_other/checkpoint_0", str(trial), True)
    assert "symlink" in refusal(str(trial / "escape"), str(trial), True)
    assert "symlink" in refusal(str(trial / "escape" / "sub"), str(trial), True)
    # Remote filesystems have no symlinks to check, the path rules still hold.
    assert refusal("bucket/exp/trial_1/checkpoint_000001", "bucket/exp/trial_1", False) is None
    assert "'..'" in refusal("bucket/exp/trial_1/../x", "bucket/exp/trial_1", False)
    assert os.path.isdir(outside)
