"""Driver SIGKILLs on the S3 test server (two per run) and with a class trainable (issue 27).

Small runs (``TRIALS`` trials x ``ITERS`` iterations of ``STEP_S`` s, 2 at a time, a
checkpoint every iteration, every executed iteration counted by :mod:`resume_trainables`),
driven by :mod:`resume_crashes`: ``fit`` (and, on S3, then ``Tuner.restore``) SIGKILLed at
seeded random points, then restored to the end. Asserted, with ``EventLogCallback()``:

- every iteration run again was executed after its trial's newest checkpoint in the log at
  the kill before (0 redone beyond those), a trial Ray's saved state did not have included;
- the final ``ResultGrid`` is an uninterrupted run's (no error, every trial's last result at
  iteration ``ITERS`` with score ``ITERS * x``, checkpoint ``checkpoint_<ITERS - 1>``);
- the log verifies, and every ``ResumeAdvanced`` points at a checkpoint folder that exists on
  the experiment's storage (on S3: looked up through pyarrow's ``S3FileSystem``).

The counts with and without the callback, on bigger runs, are the benchmark's
(``python -m benchmarks --section resume``). The class-trainable scenario also runs on the
oldest supported Ray (``.ci/run``).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from resume_crashes import Crashes

from statemachine.cli import cli
from statemachine.log import EventStore, verify
from tests.s3_server import S3Server

pytestmark = [pytest.mark.ray, pytest.mark.slow]

TRIALS, ITERS, STEP_S = 3, 5, 0.3
SEED = 2027


def resume_advanced(url: str) -> list[Any]:
    """Every ``ResumeAdvanced`` in the log."""
    with EventStore.open(url, create=False) as store:
        return [e.event for t in store.list_trials("exp") for e in store.read_trial("exp", t)
                if e.type_name == "ResumeAdvanced"]


def assert_resumed_from_the_log(run: Crashes, grid: dict[str, Any]) -> list[Any]:
    """The run's outcome is an uninterrupted run's, and only work the log did not hold was
    redone."""
    assert grid == run.uninterrupted_grid()
    # Every trial redoes only what its last checkpoint in the log did not hold, the third
    # (x=3) included: created only when one of the first two ends (2 at a time), it is in no
    # experiment state Ray saved before then, and when it started after Ray's last save Ray's
    # search algorithm creates it again after the restore, resumed from the log's checkpoint.
    assert run.redone_beyond_checkpoints() == []
    url = f"sqlite:///{run.log_path()}"
    with EventStore.open(url, create=False) as store:
        assert verify(store, "exp").ok
    advanced = resume_advanced(url)
    assert advanced, "no kill left Ray's saved state behind the log"
    print(json.dumps({"executed_at_kills": run.executed_at_kills, "redone": run.redone(),
                      "advanced": [(a.from_checkpoint, a.to_checkpoint, a.iterations_saved,
                                    a.finished) for a in advanced]}))
    return advanced


def test_two_kills_on_s3_redo_only_the_work_after_each_trials_last_checkpoint(
    s3_env: S3Server, tmp_path: Path
) -> None:
    import pyarrow.fs

    bucket = f"resume-{uuid.uuid4().hex[:8]}"
    s3_env.make_bucket(bucket)
    (tmp_path / "home").mkdir()
    run = Crashes(tmp_path, f"s3://{bucket}/exps", TRIALS, ITERS, STEP_S,
                  env={**s3_env.env, "HOME": str(tmp_path / "home")})
    grid = run.run("function", kills=2, seed=f"{SEED}-s3")
    advanced = assert_resumed_from_the_log(run, grid)
    fs = s3_env.filesystem()
    for event in advanced:  # the newest complete checkpoint, found in the bucket
        assert event.to_checkpoint.startswith(f"{bucket}/exps/exp/"), event
        files = fs.get_file_info(pyarrow.fs.FileSelector(event.to_checkpoint))
        assert [f.base_name for f in files] == ["state.json"]
    # the bucket's copy of the log is the whole log: it verifies through trial-replay
    result = CliRunner().invoke(cli, ["--db", f"s3://{bucket}/exps/exp", "verify", "exp"])
    assert result.exit_code == 0, result.output


def test_a_class_trainable_that_finished_after_rays_save_is_kept_with_its_last_result(
    tmp_path: Path
) -> None:
    # Ray saves its experiment state at the start only (the period is 300 s), and copies the
    # trials' result.json to storage with it: killed once the first two trials have ended
    # (1 or 2 iterations into the third), the log knows their ends, Ray's state and storage
    # do not; their last results come from what the callback wrote as they completed.
    run = Crashes(tmp_path, str(tmp_path / "results"), TRIALS, ITERS, STEP_S,
                  env={"TUNE_GLOBAL_CHECKPOINT_S": "300"})
    grid = run.run("class", kills=1, seed=f"{SEED}-class", first=(2 * ITERS + 1, 2 * ITERS + 2))
    advanced = assert_resumed_from_the_log(run, grid)
    assert sorted(a.finished for a in advanced if a.finished) == ["TERMINATED", "TERMINATED"]
    for event in advanced:
        assert Path(event.to_checkpoint, "state.json").exists()
