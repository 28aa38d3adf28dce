"""The README's Tune driver runs as written, with real Ray, and does what the README says.

The ``python`` block under "Use it in a Tune driver" is executed verbatim; only the helpers it
leaves to the reader (``new_state``, ``load_state``, ``done``, ``train_step``, ``metrics``,
``save_state``) are defined here, around a counter kept in a checkpoint folder. Training fails
once at step 2 and the first checkpoint load after it fails too: with ``restoring()`` around
the load, the README promises a restore failure that is retried and does not count against
``max_failures``: the README's ``RetryPolicy(restore_retry_num=2)`` grants the retry where
Ray's own ``TUNE_RESTORE_RETRY_NUM`` (unset here: Ray's default, 0) would not.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.tune.tunekit import REPO, assert_log_matches_ray, stored_events

pytestmark = [pytest.mark.ray, pytest.mark.slow]

HELPERS = '''
import json, os, tempfile

def _once(name):
    try:
        os.close(os.open(os.path.join(CTL, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True

def new_state(config):
    return {"i": 0}

def load_state(checkpoint):
    with checkpoint.as_directory() as folder:
        if _once("load-failed"):
            raise OSError("checkpoint folder unreadable")
        with open(os.path.join(folder, "state.json")) as f:
            return json.load(f)

def done(state):
    return state["i"] >= 4

def train_step(state):
    if state["i"] == 2 and _once("step-failed"):
        raise ValueError("training failed at step 2")
    return {"i": state["i"] + 1}

def metrics(state):
    return {"i": state["i"]}

def save_state(state):
    from ray import tune
    folder = tempfile.mkdtemp()
    with open(os.path.join(folder, "state.json"), "w") as f:
        json.dump(state, f)
    return tune.Checkpoint.from_directory(folder)
'''


def readme_driver() -> str:
    """The first ``python`` block after the README's "Use it in a Tune driver" heading."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Use it in a Tune driver"):]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match, "README.md: no python block under 'Use it in a Tune driver'"
    return match.group(1)


def test_the_readme_says_ray_grants_no_restore_retry_by_default() -> None:
    import inspect

    from ray.tune.experiment import trial

    # What Ray itself does: the variable read with 0 as its default.
    assert 'os.environ.get("TUNE_RESTORE_RETRY_NUM", 0)' in inspect.getsource(trial)
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Use it in a Tune driver"):text.index("## Debug")]
    assert "`TUNE_RESTORE_RETRY_NUM` defaults to 0" in section
    assert "RetryPolicy(max_failures=3, restore_retry_num=2)" in readme_driver()


def test_the_readme_driver_runs_and_a_failed_load_is_a_retried_restore(
    ray_cluster: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ray import tune

    if not hasattr(tune, "get_checkpoint"):
        pytest.skip("this Ray has get_checkpoint/report only under ray.train (the README's "
                    "comments say so for Ray 2.40)")
    # Ray's default (0 restore retries): the README's policy carries the number itself.
    monkeypatch.delenv("TUNE_RESTORE_RETRY_NUM", raising=False)
    # The block names no storage_path: Ray's default (~/ray_results) is moved under tmp_path.
    monkeypatch.setattr("ray.train.constants.DEFAULT_STORAGE_PATH", str(tmp_path / "results"))
    ctl = tmp_path / "ctl"
    ctl.mkdir()
    # A module of its own (not importable by Ray's workers): cloudpickle ships the driver's
    # functions and helpers by value, as it does a user's script.
    namespace: dict[str, Any] = {"__name__": "readme_driver", "CTL": str(ctl)}
    exec(compile(HELPERS + readme_driver(), "README.md", "exec"), namespace)

    grid = namespace["tuner"].fit()

    (trial,) = grid._experiment_analysis.trials
    assert (trial.status, trial.num_failures) == ("TERMINATED", 1)
    experiment = Path(trial.storage.experiment_fs_path)
    assert experiment.is_relative_to(tmp_path / "results")
    url = f"sqlite:///{experiment / 'statemachine.db'}"
    name = experiment.name
    states = assert_log_matches_ray(url, name, grid)
    assert states[trial.trial_id].total_restore_failures == 1
    failures = [(e.event.error.kind, e.event.error.cause_type, e.decision)
                for e in stored_events(url, name, trial.trial_id)
                if e.type_name == "TrialFailed"]
    assert failures == [("TrainingError", "builtins.ValueError", "RECOVER"),
                        ("RestoreError", "builtins.OSError", "RETRY_RESTORE")]
