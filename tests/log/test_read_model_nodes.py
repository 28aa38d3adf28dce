"""``nodes`` from the trials' shares kept with their snapshots: a cause learned after the
snapshot that counted the failure moves the death as the whole history says, and a log whose
snapshots have no share (written before revision 0006) reads the same, on SQLite and
PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text

from statemachine import RetryPolicy
from statemachine.domain.death import ActorDeath, DeathCause
from statemachine.domain.events import (
    CheckpointSaved,
    DeathCauseLearned,
    TrialAdded,
    TrialFailed,
    TrialStarted,
)
from statemachine.domain.failures import ActorError, RestoreError
from statemachine.domain.node_tally import NodeTally, tally_nodes
from statemachine.domain.nodes import NodeRef
from statemachine.log import EventStore, ExperimentLog
from statemachine.log.read import ReadModel

POLICY = RetryPolicy(max_failures=-1, restore_retry_num=3)
A = NodeRef("a" * 56, "10.0.0.7", "host-a")
B = NodeRef("b" * 56, "10.0.0.8", "host-b")
GONE = "ray.exceptions.ActorDiedError"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))


def nodes(url: str) -> tuple[list[NodeTally], list[NodeTally]]:
    """``nodes`` as the read model answers, and the tally of the whole history."""
    with EventStore.open(url, create=False) as store:
        history = tally_nodes((r.trial_id, r.event) for r in store.read_experiment("exp"))
        return ReadModel(store).nodes("exp"), history


def causes(tallies: list[NodeTally]) -> dict[str, dict[DeathCause, int]]:
    return {t.node.key: t.causes for t in tallies}


def test_a_cause_learned_after_the_snapshot_moves_the_death(url: str) -> None:
    with ExperimentLog.open(url, "exp", POLICY) as log:
        log.record_many([("t1", TrialAdded()), ("t1", TrialStarted(node=A)),
                         ("t1", CheckpointSaved("c1")),
                         ("t1", TrialFailed(error=ActorError(GONE, "gone"), node=A))])
        died = log.state("t1").seq  # type: ignore[union-attr]
        log.record_many([("t1", TrialStarted(restore_from="c1", node=B))])
    # the clean close kept the death (cause unknown) in t1's share; the cause comes later,
    # in a session that ends without a snapshot
    log = ExperimentLog.open(url, "exp", POLICY)
    log.record("t1", DeathCauseLearned(failure_seq=died, death=ActorDeath(DeathCause.OOM)))
    log.close(clean=False)
    got, history = nodes(url)
    assert got == history
    assert causes(got) == {A.node_id: {DeathCause.OOM: 1}, B.node_id: {}}
    # a driver continues from that snapshot and its tail; its own snapshot then carries it
    with ExperimentLog.open(url, "exp", POLICY) as log:
        log.record("t1", DeathCauseLearned(failure_seq=died,
                                           death=ActorDeath(DeathCause.NODE_DIED)))
        log.record("t1", TrialFailed(error=RestoreError("builtins.OSError", "io"), node=B))
    got, history = nodes(url)
    assert got == history
    assert causes(got) == {A.node_id: {DeathCause.NODE_DIED: 1}, B.node_id: {}}
    assert [(t.node.key, t.attempts, t.restore_attempts, t.restore_failures, t.actor_deaths)
            for t in got] == [(B.node_id, 1, 1, 1, 0), (A.node_id, 1, 0, 0, 1)]


def test_snapshots_without_a_share_read_from_history(url: str) -> None:
    with ExperimentLog.open(url, "exp", POLICY) as log:
        for n in range(4):
            log.record_many([(f"t{n}", TrialAdded()), (f"t{n}", TrialStarted(node=A)),
                             (f"t{n}", TrialFailed(error=ActorError(GONE, "gone"),
                                                   node=A if n % 2 else B))])
    engine = create_engine(url)
    with engine.begin() as conn:  # the rows as revision 0006 leaves a log written before it
        conn.execute(text("UPDATE snapshots SET nodes = NULL"))
    engine.dispose()
    got, history = nodes(url)
    assert got == history and sum(t.attempts for t in got) == 4
    # a driver resumes those trials: their shares stay unknown, and still read right
    with ExperimentLog.open(url, "exp", POLICY) as log:
        log.record_many([("t0", TrialStarted(node=B)), ("t4", TrialAdded()),
                         ("t4", TrialStarted(node=B))])
    got, history = nodes(url)
    assert got == history
    assert [(t.node.key, t.attempts, t.actor_deaths, len(t.trials)) for t in got] == [
        (A.node_id, 4, 2, 4), (B.node_id, 2, 2, 3)]
