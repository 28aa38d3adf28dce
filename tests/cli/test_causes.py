"""Causes of actor deaths in the CLI: ``what-if`` takes the rules per cause and repeats,
``explain`` says which rule decided, a cause learned late is worded under its failure.

The log is recorded through a real :class:`ExperimentLog` (the live path), the commands run
in-process.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statemachine.domain.death import ActorDeath, DeathCause
from statemachine.domain.events import (
    DeathCauseLearned,
    Event,
    TrialAdded,
    TrialCompleted,
    TrialFailed,
    TrialStarted,
)
from statemachine.domain.failures import ActorError, TrainingError
from statemachine.domain.nodes import NodeRef
from statemachine.domain.policy import RetryPolicy
from statemachine.log import ExperimentLog
from tests.cli.conftest import Run
from tests.cli.test_bad_input import assert_one_line_error

NODE = NodeRef("c9" * 28, "10.0.0.9", "worker-c")
NODE_DIED = ActorDeath(DeathCause.NODE_DIED, "NODE_DIED/UNEXPECTED_TERMINATION",
                       "health check failed")


def died(death: ActorDeath, iteration: int | None = None) -> TrialFailed:
    return TrialFailed(ActorError("ray.exceptions.ActorDiedError", "The actor died.",
                                  death=death), node=NODE, iteration=iteration)


def nan(iteration: int | None) -> TrialFailed:
    return TrialFailed(TrainingError("builtins.ValueError", "loss is NaN"), iteration=iteration)


TRIALS: dict[str, list[Event]] = {
    # max_failures=3 throughout; every trial completes as recorded
    "t_node": [TrialAdded(), TrialStarted(), died(NODE_DIED), TrialStarted(),
               died(NODE_DIED), TrialStarted(), TrialCompleted()],
    "t_oom": [TrialAdded(), TrialStarted(), died(ActorDeath(DeathCause.OOM, "oom_context")),
              TrialStarted(), TrialCompleted()],
    "t_nan": [TrialAdded(), TrialStarted(), nan(57), TrialStarted(), nan(57), TrialStarted(),
              nan(57), TrialStarted(), TrialCompleted()],
    "t_old": [TrialAdded(), TrialStarted(), nan(None), TrialStarted(), nan(None),
              TrialStarted(), TrialCompleted()],
    "t_late": [TrialAdded(), TrialStarted(), died(ActorDeath()),
               DeathCauseLearned(4, NODE_DIED, "state_api"), TrialStarted(), TrialCompleted()],
}


def record(db: Path, experiment: str, policy: RetryPolicy, trials: dict[str, list[Event]]
           ) -> None:
    with ExperimentLog.open(db, experiment, policy) as log:
        for trial_id, events in trials.items():
            for event in events:
                log.record(trial_id, event)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "causes.db"
    record(path, "exp", RetryPolicy(max_failures=3), TRIALS)
    return path


def what_if(invoke: Callable[..., Run], db: Path, *args: str) -> dict[str, Any]:
    run = invoke("--db", db, "what-if", "exp", *args, "--json")
    assert run.exit_code == 0, run.stderr
    return {t["trial_id"]: t for t in json.loads(run.stdout)["trials"]}


def test_what_if_oom_gives_up(invoke: Callable[..., Run], db: Path) -> None:
    rows = what_if(invoke, db, "--on-cause", "oom=give_up")
    assert rows["t_oom"]["recorded"]["status"] == "TERMINATED"
    assert rows["t_oom"]["hypothetical"]["status"] == "ERROR"
    assert rows["t_oom"]["hypothetical"]["num_failures"] == 1 and rows["t_oom"]["changed"]
    assert not rows["t_node"]["changed"] and not rows["t_nan"]["changed"]


def test_what_if_node_deaths_are_not_counted(invoke: Callable[..., Run], db: Path) -> None:
    rows = what_if(invoke, db, "--on-cause", "node_died=retry_not_counted")
    node = rows["t_node"]
    assert node["recorded"]["num_failures"] == 2
    assert node["hypothetical"]["num_failures"] == 0
    assert node["hypothetical"]["status"] == "TERMINATED"
    # with a budget of 1, the second node death gives up
    rows = what_if(invoke, db, "--on-cause", "node_died=retry_not_counted",
                   "--cause-budget", "node_died=1")
    assert rows["t_node"]["hypothetical"]["last_decision"] == "GIVE_UP"
    assert rows["t_node"]["cut_at_seq"] is not None


def test_what_if_repeats_end_the_trial(invoke: Callable[..., Run], db: Path) -> None:
    rows = what_if(invoke, db, "--give-up-on-repeats", "2")
    assert rows["t_nan"]["hypothetical"]["status"] == "ERROR"
    assert rows["t_nan"]["hypothetical"]["num_failures"] == 2
    assert "cut" in rows["t_nan"]["note"]
    # a log without iterations: never a repeat, and said so
    assert not rows["t_old"]["changed"]
    assert "2 failures without a recorded training iteration" in rows["t_old"]["note"]


def test_what_if_names_failures_of_unknown_cause(invoke: Callable[..., Run], db: Path) -> None:
    rows = what_if(invoke, db, "--on-cause", "unknown=give_up")
    late = rows["t_late"]
    assert late["hypothetical"]["status"] == "ERROR"  # decided without the cause learned
    assert "1 actor failure of unknown cause" in late["note"]
    assert "a cause learned later does not change its decision" in late["note"]


def test_what_if_merges_the_rules_into_the_policys_own(
    invoke: Callable[..., Run], tmp_path: Path
) -> None:
    db = tmp_path / "ruled.db"
    policy = RetryPolicy(max_failures=3, on_cause={"node_died": "retry_not_counted"},
                         cause_budgets={"node_died": 5})
    record(db, "exp", policy, {"t_node": TRIALS["t_node"], "t_oom": TRIALS["t_oom"]})
    rows = what_if(invoke, db, "--on-cause", "oom=give_up")
    assert rows["t_node"]["hypothetical"]["num_failures"] == 0  # node_died kept
    assert rows["t_oom"]["hypothetical"]["status"] == "ERROR"
    # counting node deaths again drops the policy's own node_died budget with it
    rows = what_if(invoke, db, "--on-cause", "node_died=count")
    assert rows["t_node"]["hypothetical"]["num_failures"] == 2


def test_explain_says_which_rule_decided(invoke: Callable[..., Run], tmp_path: Path) -> None:
    db = tmp_path / "ruled.db"
    policy = RetryPolicy(max_failures=3, on_cause={"node_died": "retry_not_counted"},
                         cause_budgets={"node_died": 2})
    record(db, "exp", policy, {"t_node": TRIALS["t_node"]})
    run = invoke("--db", db, "explain", "exp", "t_node", "--json")
    steps = [s["text"] for s in json.loads(run.stdout)["steps"] if s["event"] == "TrialFailed"]
    assert steps[0].startswith("Uncounted node_died # 1 on node 10.0.0.9")
    assert ("node died (unexpected termination: health check failed)" in steps[0])
    assert ("Decision RECOVER_NOT_COUNTED: not counted as a failure, rule node_died "
            "(on_cause node_died=retry_not_counted, at most 2)") in steps[0]
    assert steps[1].startswith("Uncounted node_died # 2")
    text = invoke("--db", db, "explain", "exp", "t_node").stdout
    assert "on_cause node_died=retry_not_counted (at most 2)" in text


def test_explain_words_the_rules_that_give_up(invoke: Callable[..., Run], tmp_path: Path
                                              ) -> None:
    db = tmp_path / "ruled.db"
    record(db, "exp", RetryPolicy(max_failures=3, on_cause={"oom": "give_up"},
                                  give_up_on_repeats=2),
           {"t_oom": TRIALS["t_oom"][:3], "t_nan": TRIALS["t_nan"][:5]})
    oom = json.loads(invoke("--db", db, "explain", "exp", "t_oom", "--json").stdout)
    assert "oom is not retried, rule oom (on_cause oom=give_up; counted as failure 1 of " \
           "max_failures 3)" in oom["summary"]
    nan_ = json.loads(invoke("--db", db, "explain", "exp", "t_nan", "--json").stdout)
    assert ("the same failure (builtins.ValueError: loss is NaN) at iteration 57, 2 times in "
            "a row, is not worth a retry (give_up_on_repeats=2") in nan_["summary"]


def test_explain_words_a_cause_learned_late(invoke: Callable[..., Run], db: Path) -> None:
    steps = json.loads(invoke("--db", db, "explain", "exp", "t_late", "--json").stdout)["steps"]
    by_event = {s["event"]: s["text"] for s in steps}
    assert by_event["TrialFailed"].startswith(
        "Actor died on node 10.0.0.9 (node-id c9c9c9c9c9c9...): ActorError, cause unknown "
        "(ray.exceptions.ActorDiedError: The actor died.). Decision RECOVER: counted as "
        "failure 1 of max_failures 3")
    assert by_event["DeathCauseLearned"] == (
        "Ray told later (state_api) why the actor of the failure at seq 4 died: node died "
        "(unexpected termination: health check failed). That failure stays decided as it "
        "was.")


@pytest.mark.parametrize(("args", "fragment"), [
    (["--on-cause", "gremlins=give_up"], "unknown cause 'gremlins'"),
    (["--on-cause", "oom"], "'oom' is not CAUSE=ACTION"),
    (["--on-cause", "oom=pray"], "unknown action 'pray' for oom"),
    (["--cause-budget", "oom=2"], "needs on_cause['oom'] = retry_not_counted"),
    (["--cause-budget", "preempted=1"], "the preemption budget is max_preemptions"),
    (["--on-cause", "oom=retry_not_counted", "--cause-budget", "oom=-1"], "'--cause-budget'"),
    (["--on-cause", "oom=retry_not_counted", "--cause-budget", "oom=x"], "'--cause-budget'"),
    (["--give-up-on-repeats", "1"], "'--give-up-on-repeats'"),
    (["--give-up-on-repeats", "never"], "'--give-up-on-repeats'"),
    (["--count-preemption-as-failure", "--on-cause", "preempted=retry_not_counted"],
     "contradicts count_preemption_as_failure"),
])
def test_bad_rules_are_refused_in_one_line(
    invoke: Callable[..., Run], db: Path, args: list[str], fragment: str
) -> None:
    before = db.read_bytes()
    assert_one_line_error(invoke("--db", db, "what-if", "exp", *args), fragment)
    assert db.read_bytes() == before
