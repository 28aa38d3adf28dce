"""``nodes`` counts the actor deaths by cause: a column (and a JSON key) per cause that
occurred, after the existing ones; a cause Ray told late counts for the failure it names."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from statemachine.domain.death import ActorDeath, DeathCause
from statemachine.domain.events import (
    DeathCauseLearned,
    Event,
    TrialAdded,
    TrialCompleted,
    TrialFailed,
    TrialStarted,
)
from statemachine.domain.policy import RetryPolicy
from statemachine.log import EventStore
from tests.cli.conftest import EXP, Run
from tests.cli.test_causes import NODE, NODE_DIED, TRIALS, died, record


def late(death: ActorDeath) -> list[Event]:
    """A death of unknown cause, then the cause Ray told: the failure is seq 4 (a PolicySet of
    the log's policy goes first, then TrialAdded, TrialStarted)."""
    return [TrialAdded(), TrialStarted(), died(ActorDeath()), DeathCauseLearned(4, death,
            "state_api"), TrialStarted(), TrialCompleted()]


def _late_seq(db: Path) -> tuple[int, int]:
    """The stored seq of t_late's failure, and the seq its DeathCauseLearned names."""
    store = EventStore.open(f"sqlite:///{db}", create=False)
    try:
        rows = list(store.read_trial("exp", "t_late"))
    finally:
        store.close()
    failed = next(r for r in rows if isinstance(r.event, TrialFailed))
    learned = next(r.event for r in rows if isinstance(r.event, DeathCauseLearned))
    return failed.seq, learned.failure_seq


def test_nodes_has_a_column_per_cause_that_occurred(
    invoke: Callable[..., Run], tmp_path: Path
) -> None:
    db = tmp_path / "causes.db"
    crash = died(ActorDeath(DeathCause.WORKER_CRASHED, "WORKER_DIED/SYSTEM_ERROR"))
    trials = {**TRIALS, "t_late": late(NODE_DIED),
              "t_crash": [*TRIALS["t_oom"][:2], crash, *TRIALS["t_oom"][3:]]}
    record(db, "exp", RetryPolicy(max_failures=3), trials)
    seq, named = _late_seq(db)
    assert seq == named  # the test log's late cause names its failure
    run = invoke("--db", db, "nodes", "exp", "--json")
    assert run.exit_code == 0, run.stderr
    row = next(r for r in json.loads(run.stdout) if r["node_id"] == NODE.node_id)
    # t_node: 2 node deaths, t_late: 1 unknown then learned node_died, t_oom, t_crash
    assert row["causes"] == {"node_died": 3, "oom": 1, "worker_crashed": 1}
    assert row["actor_deaths"] == 5 and row["preemptions"] == 0
    table = invoke("--db", db, "nodes", "exp", "--wide")
    assert table.exit_code == 0, table.stderr
    header = next(line for line in table.stdout.splitlines() if "host" in line)
    assert header.index("trials") < header.index("node_died") < header.index("oom") \
        < header.index("worker_crashed")
    assert "unknown" not in header.split("trials", 1)[1]  # the late cause replaced it


def test_a_late_preemption_moves_to_the_preemptions(
    invoke: Callable[..., Run], tmp_path: Path
) -> None:
    db = tmp_path / "late.db"
    events = late(ActorDeath(DeathCause.PREEMPTED, "NODE_DIED/AUTOSCALER_DRAIN_PREEMPTED",
                             "spot"))
    record(db, "exp", RetryPolicy(max_failures=3), {"t_late": events})
    assert _late_seq(db)[0] == 4
    run = invoke("--db", db, "nodes", "exp", "--json")
    row = next(r for r in json.loads(run.stdout) if r["node_id"] == NODE.node_id)
    assert (row["preemptions"], row["actor_deaths"]) == (1, 0)
    assert "causes" not in row  # only the preemption column says it


def test_no_cause_no_new_column(invoke: Callable[..., Run], fixture_db: Path) -> None:
    rows = json.loads(invoke("--db", fixture_db, "nodes", EXP, "--json").stdout)
    assert all("causes" not in r for r in rows)
    assert NODE_DIED.cause is DeathCause.NODE_DIED
