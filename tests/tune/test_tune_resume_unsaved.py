"""A trial created after Ray's last save of the experiment state, after a driver crash (issue 27).

3 trials x 5 iterations (2 at a time, a checkpoint every iteration, function trainable), Ray's
experiment state saved at the start only (``TUNE_GLOBAL_CHECKPOINT_S=300``): the third trial
is created when one of the first two ends, after that save. The driver is SIGKILLed once the
third has run 2 or 3 iterations (the log holds a checkpoint of it) and the experiment restored
to its end (:mod:`resume_crashes`). Ray's restore does not have the third trial; its search
algorithm creates it again, with the same id and config in a new folder, and no Tune hook sees
it before its actor starts: it runs from scratch. Asserted: the log says why
(``ResumeNotAdvanced`` with :data:`~statemachine.tune.tracking.REGENERATED`, worded by
``explain``), records no new incarnation of it, the only work redone beyond the log's
checkpoints is that trial's, the final ``ResultGrid`` is an uninterrupted run's and the log
verifies.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from resume_crashes import Crashes

from statemachine.cli import cli
from statemachine.log import EventStore, verify
from statemachine.tune.tracking import REGENERATED

pytestmark = [pytest.mark.ray, pytest.mark.slow]

TRIALS, ITERS, STEP_S = 3, 5, 0.3


def test_a_trial_created_after_rays_last_save_is_redone_and_the_log_says_why(
    tmp_path: Path
) -> None:
    run = Crashes(tmp_path, str(tmp_path / "results"), TRIALS, ITERS, STEP_S,
                  env={"TUNE_GLOBAL_CHECKPOINT_S": "300"})
    grid = run.run("function", kills=1, seed="2027-unsaved",
                   first=(2 * ITERS + 2, 2 * ITERS + 3))
    assert grid == run.uninterrupted_grid()
    url = f"sqlite:///{run.log_path()}"
    with EventStore.open(url, create=False) as store:
        assert verify(store, "exp").ok
        (third,) = [t for t in store.list_trials("exp") if t.endswith("_00002")]
        events = [e for e in store.read_trial("exp", third)]
    logged = run.logged_at_kills[0][third]
    assert logged >= 1, "the log held no checkpoint of the third trial at the kill"
    # it ran from scratch: every iteration the log had a checkpoint of was run again
    runs = [it for trial, it in run.redone_beyond_checkpoints() if trial == third]
    assert set(range(1, logged + 1)) <= set(runs)
    assert {t for t, _ in run.redone_beyond_checkpoints()} <= {third}
    # ... and the log says why, once, naming the newest checkpoint it held
    not_advanced = [e.event for e in events if e.type_name == "ResumeNotAdvanced"]
    assert [e.reason for e in not_advanced] == [REGENERATED]
    assert not_advanced[0].checkpoint.endswith(f"checkpoint_{logged - 1:06d}")
    assert "TrialRecreated" not in [e.type_name for e in events]
    result = CliRunner().invoke(cli, ["--db", url, "explain", "exp", third],
                                env={"COLUMNS": "4000"})
    assert result.exit_code == 0, result.output
    assert f"checkpoint_{logged - 1:06d}: {REGENERATED}; that work is redone" in result.output
