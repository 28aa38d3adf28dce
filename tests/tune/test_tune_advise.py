"""advise on real Ray Tune runs with faults injected at known seeded rates: a first run under
a stingy policy, advise recommends a policy, a second run (other fault draws) under it saves
the share of trials advise predicted. Saved in the second run: a trial that what-if says
would have ended ERROR under the stingy policy, and that completed."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from statemachine import EventStore, RetryPolicy
from statemachine.advise import Grid, advise
from statemachine.advise.reader import read_histories
from statemachine.advise.stats import wilson
from statemachine.cli.whatif import what_if

# About a minute on two free cores (two Tune runs of 10 small trials); far longer on a
# loaded machine, hence the timeout above the suite's 300 s.
pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(900)]

TRIALS = 10
#: Stingy, but a trial restores once: the first run records restores to estimate them from
#: (under max_failures=0 none happens and their chance could only come from the prior).
STINGY = RetryPolicy(max_failures=1, restore_retry_num=0)
FAULTS = {"iters": 10, "p_fail": 0.12, "p_restore_fail": 0.3, "sleep": 0.01}


def run(tmp_path: Path, name: str, policy: RetryPolicy, seed: int) -> str:
    from ray import tune

    from statemachine.tune import CheckpointConfig, EventLogCallback, FailureConfig, RunConfig
    from tests.tune.tune_trainables import SeededFaults

    ctl = tmp_path / f"ctl-{name}"
    ctl.mkdir()
    space: dict[str, Any] = {**FAULTS, "ctl": str(ctl), "seed": seed,
                             "tag": tune.grid_search([f"t{i}" for i in range(TRIALS)])}
    tune.Tuner(
        SeededFaults, param_space=space,
        run_config=RunConfig(
            name=name, storage_path=str(tmp_path / "results"),
            callbacks=[EventLogCallback(policy=policy)], verbose=0,
            failure_config=FailureConfig(max_failures=policy.max_failures),
            checkpoint_config=CheckpointConfig(checkpoint_frequency=1)),
    ).fit()
    return f"sqlite:///{tmp_path / 'results' / name / 'statemachine.db'}"


def test_the_recommended_policy_saves_what_advise_predicted(
        ray_cluster: None, tmp_path: Path) -> None:
    first = run(tmp_path, "stingy", STINGY, seed=1)
    with EventStore.open(first, create=False) as store:
        histories = read_histories(store, ["stingy"]).histories
    advice = advise(histories, Grid(restore_retry_num=(0, 1, 2, 3),
                                    max_failures=(0, 1, 2, 3, 4)), seed=0)
    rec = advice.recommendation
    assert rec.verdict == "recommend", rec.why
    assert rec.policy is not None
    errored = rec.policy.errored
    low, high = rec.policy.saved_interval()
    predicted = (rec.policy.saved_mean / errored, low / errored, high / errored)

    chosen = rec.policy.policy
    second = run(tmp_path, "advised", chosen, seed=2)
    with EventStore.open(second, create=False) as store:
        again = read_histories(store, ["advised"]).histories
    stingy = {"max_failures": 1, "restore_retry_num": 0}
    would_err = [h for h in again
                 if what_if(h.trial_id, h.events, stingy).hypothetical["status"] == "ERROR"]
    saved = [h for h in would_err if h.final.status.value == "TERMINATED"]
    observed = wilson(len(saved), len(would_err))
    report = (f"advise recommended {rec.code[0]}: predicted {predicted[0]:.0%} saved "
              f"(95% {predicted[1]:.0%}-{predicted[2]:.0%}, {rec.policy.saved_mean:.1f} of "
              f"{errored}); observed {len(saved)} of {len(would_err)} = "
              f"{observed.value if observed.value is not None else float('nan'):.0%} "
              f"(95% {observed.low or 0:.0%}-{observed.high or 0:.0%})")
    print(report)
    out = os.environ.get("ADVISE_RAY_REPORT")
    if out:
        Path(out).write_text(report + "\n")
    assert would_err, "the second run had no trial the stingy policy would have lost"
    assert observed.low is not None and observed.high is not None
    # the observed share's interval and the predicted one overlap
    assert observed.low <= predicted[2] and predicted[1] <= observed.high, report
