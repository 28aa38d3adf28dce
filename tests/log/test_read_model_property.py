"""Property: the read model (snapshot rows plus the events after them) answers exactly what a
full fold of the log answers, on SQLite and PostgreSQL, whatever the snapshots are: fresh,
stale (a crashed driver's, or behind by the snapshot interval), missing, from an older
machine revision, without the summary columns (a row 0004 could not fill in), or without
(or with a broken) share of the per-node tally (a row written before 0006).

The trials start and fail on nodes (the same node id described differently, nodes known
only by an IP, none at all) and learn the causes of earlier actor deaths, often after a
snapshot took the failure into the trial's share: ``nodes`` must still equal the tally of
the whole history."""

from __future__ import annotations

import contextlib
import tempfile
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from statemachine import InvalidTransitionError, RetryPolicy
from statemachine.domain.death import ActorDeath, DeathCause
from statemachine.domain.events import (
    DeathCauseLearned,
    Event,
    RestoreSucceeded,
    TrialFailed,
    TrialStarted,
)
from statemachine.domain.failures import ActorError, RestoreError, TrainingError
from statemachine.domain.node_tally import tally_nodes
from statemachine.domain.nodes import NodeRef
from statemachine.domain.state import TrialState
from statemachine.log import EventStore, ExperimentLog, replay_experiment
from statemachine.log.read import SORTS, STATUSES, ReadModel, TrialSummary
from tests.log.test_rehydration_property import catalogue, policies, steps

EXPERIMENTS = ("exp", "other")

#: What is done to each trial's snapshot row after the log is written.
damage = st.dictionaries(
    st.sampled_from(["a", "b", "c", "d"]),
    st.sampled_from(["delete", "older_machine", "no_summary", "no_nodes", "bad_nodes"]),
    max_size=4,
)


#: Where attempts run: one node id described three ways (two equally detailed), a node
#: known by its IP alone, one by its hostname alone, and nothing known.
NODES = (
    NodeRef("a" * 56, "10.0.0.7", None),
    NodeRef("a" * 56, None, "host-a"),
    NodeRef("a" * 56, "10.0.0.7", "host-a"),
    NodeRef("b" * 56),
    NodeRef(None, "10.0.0.8", None),
    NodeRef(None, None, "host-c"),
    None,
)
_GONE = "ray.exceptions.ActorDiedError"


def node_catalogue(log: ExperimentLog, trial: str, k: int) -> list[Event]:
    """The rehydration property's events, and starts and failures on nodes, and causes
    learned for the trial's earlier actor deaths (the seqs of its ``ActorError`` failures,
    read from the log) or for a seq that is none."""
    node = NODES[k % len(NODES)]
    events: list[Event] = [
        *catalogue(log.policy),
        TrialStarted(node=node),
        TrialStarted(restore_from="c1", node=node),
        TrialFailed(error=ActorError(_GONE, "gone"), node=node),
        TrialFailed(error=ActorError(_GONE, "gone", death=ActorDeath(DeathCause.OOM)),
                    node=node),
        TrialFailed(error=ActorError(_GONE, "drained", preempted=True), node=node),
        TrialFailed(error=RestoreError("builtins.OSError", "restore"), node=node),
        TrialFailed(error=TrainingError("builtins.ValueError", "train"), node=node),
    ]
    state = log.state(trial)
    if state is not None:
        deaths = [seq for seq, event in enumerate(log.events(trial), 1)
                  if isinstance(event, TrialFailed) and isinstance(event.error, ActorError)]
        causes = list(DeathCause)
        for i, seq in enumerate([*deaths, state.seq + 5]):
            events.append(DeathCauseLearned(failure_seq=seq,
                                            death=ActorDeath(causes[(k + i) % len(causes)])))
    return events


def pick(log: ExperimentLog, trial: str, k: int) -> Event | None:
    """The ``k``-th (mod n) event of :func:`node_catalogue` valid for the trial now."""
    valid = []
    for event in node_catalogue(log, trial, k // 7):
        try:
            log.preview(trial, event)
        except InvalidTransitionError:
            continue
        valid.append(event)
    return valid[k % len(valid)] if valid else None


def batch_items(log: ExperimentLog, step: tuple) -> list[tuple[str, Event]]:
    """The events of a ``("batch", trials, ks, spoil)`` step (as the rehydration property
    draws them, from :func:`node_catalogue`)."""
    _, trials, ks, spoil = step
    items = [(t, pick(log, t, k)) for t, k in zip(trials, ks, strict=False)]
    found = [(t, e) for t, e in items if e is not None]
    if spoil:
        found.extend([(trials[0], RestoreSucceeded()), (trials[0], RestoreSucceeded())])
    return found


def write(url: str, policy: RetryPolicy, snapshot_every: int, script: list[tuple],
          experiment: str) -> None:
    """Record ``script`` into ``experiment`` as the rehydration property does (clean and
    crashed restarts, batches refused whole), leaving the last session open or closed."""
    store = EventStore.open(url, sqlite_synchronous="OFF")
    log = ExperimentLog.open(store, experiment, policy, snapshot_every=snapshot_every)
    clean_end = True
    for step in script:
        if step[0] == "record":
            event = pick(log, step[1], step[2])
            if event is not None:
                log.record(step[1], event)
        elif step[0] == "batch":
            with contextlib.suppress(InvalidTransitionError):
                log.record_many(batch_items(log, step))
        else:
            log.close(clean=step[2])
            clean_end = step[2]
            log = ExperimentLog.open(store, experiment, policy, snapshot_every=step[1])
    log.close(clean=clean_end)
    store.close()


def spoil_snapshots(url: str, experiment: str, damage: dict[str, str]) -> None:
    """Damage snapshot rows behind the log's back (a cache may be anything)."""
    engine = create_engine(url)
    with engine.begin() as conn:
        exp_id = conn.execute(text("SELECT id FROM experiments WHERE name = :n"),
                              {"n": experiment}).scalar()
        for trial, how in damage.items():
            where = "experiment_id = :e AND trial_id = :t"
            args = {"e": exp_id, "t": trial}
            if how == "delete":
                conn.execute(text(f"DELETE FROM snapshots WHERE {where}"), args)
            elif how == "older_machine":
                conn.execute(text(f"UPDATE snapshots SET machine_version = 'rev0' WHERE {where}"),
                             args)
            elif how == "no_nodes":
                conn.execute(text(f"UPDATE snapshots SET nodes = NULL WHERE {where}"), args)
            elif how == "bad_nodes":
                conn.execute(text(f"UPDATE snapshots SET nodes = '{{\"nodes\": 3}}' "
                                  f"WHERE {where}"), args)
            else:
                conn.execute(text(f"UPDATE snapshots SET status = NULL, failures = NULL, "
                                  f"total_restore_failures = NULL, preemptions = NULL, "
                                  f"error_type = NULL WHERE {where}"), args)
    engine.dispose()


def full_fold(store: EventStore, experiment: str) -> list[TrialState]:
    return [r.state for r in replay_experiment(store, experiment).values()]


def summaries(states: list[TrialState], experiment: str) -> list[TrialSummary]:
    return [TrialSummary.of(experiment, s) for s in states]


def without_position(items: tuple[TrialSummary, ...] | list[TrialSummary]) -> list[TrialSummary]:
    return [replace(t, first_position=0) for t in items]


def check(url: str, data: st.DataObject) -> None:
    with EventStore.open(url, create=False) as store:
        model = ReadModel(store)
        listed = {e.info.name: e for e in model.experiments()}
        assert sorted(listed) == sorted(i.name for i in store.list_experiments())
        for experiment in EXPERIMENTS:
            states = full_fold(store, experiment)
            expected = summaries(states, experiment)
            counts = Counter(s.status.value for s in states)
            assert model.status_counts(experiment) == {s: counts.get(s, 0) for s in STATUSES}
            assert listed[experiment].status_counts == model.status_counts(experiment)
            info = next(i for i in store.list_experiments() if i.name == experiment)
            assert (listed[experiment].info.trials, listed[experiment].info.events) == (
                info.trials, info.events)
            page = model.trials(experiment)
            assert without_position(page.items) == expected and page.total == len(expected)
            for status in STATUSES:
                got = model.trials(experiment, status=status)
                assert without_position(got.items) == [t for t in expected if t.status == status]
            sort = data.draw(st.sampled_from(SORTS), label="sort")
            descending = data.draw(st.booleans(), label="descending")
            offset = data.draw(st.integers(0, 4), label="offset")
            limit = data.draw(st.none() | st.integers(0, 3), label="limit")
            restore = data.draw(st.none() | st.booleans(), label="has_restore_failures")
            got = model.trials(experiment, sort=sort, descending=descending, offset=offset,
                               limit=limit, has_restore_failures=restore)
            order = {t.trial_id: i for i, t in enumerate(expected)}
            wanted = [t for t in expected
                      if restore is None or (t.total_restore_failures > 0) == restore]
            wanted.sort(key=lambda t: (_key(t, sort), order[t.trial_id]), reverse=descending)
            end = None if limit is None else offset + limit
            assert without_position(got.items) == wanted[offset:end]
            assert got.total == len(wanted)
            for t in expected:
                assert without_position([model.trial(experiment, t.trial_id)]) == [t]
            pairs = [(r.trial_id, r.event) for r in store.read_experiment(experiment)]
            assert model.nodes(experiment) == tally_nodes(pairs)
            newest = model.position(experiment)
            since = data.draw(st.integers(0, max(newest, 0)), label="since")
            changed = model.changed_since(experiment, since)
            moved = {r.trial_id for r in store.read_experiment(experiment)
                     if r.position > since}
            assert {t.trial_id for t in changed.trials} == moved
            assert without_position(list(changed.trials)) == [t for t in expected
                                                               if t.trial_id in moved]
            assert changed.position == max(newest, since)


def _key(t: TrialSummary, sort: str) -> object:
    return {
        "first_event": 0, "trial_id": t.trial_id,
        "status": STATUSES.index(t.status) if t.status in STATUSES else 99,
        "failures": t.num_failures, "restore_failures": t.total_restore_failures,
        "preemptions": t.num_preemptions, "seq": t.seq,
    }[sort]


@contextlib.contextmanager
def new_log(backend: str, server: str | None) -> Iterator[str]:
    """A new, empty event log URL on ``backend`` (dropped afterwards)."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            yield f"sqlite:///{Path(tmp) / 'events.db'}"
        return
    import psycopg

    assert server is not None
    libpq = make_url(server).set(drivername="postgresql").render_as_string(hide_password=False)
    schema = f"sm_read_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(libpq, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield (make_url(server).update_query_dict({"options": f"-csearch_path={schema}"})
               .render_as_string(hide_password=False))
    finally:
        with psycopg.connect(libpq, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def _property(backend: str, server: str | None, examples: int) -> None:
    @settings(max_examples=examples, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(policy=policies, snapshot_every=st.integers(1, 6), script=steps,
           other=steps, damage=damage, data=st.data())
    def run(policy: RetryPolicy, snapshot_every: int, script: list[tuple],
            other: list[tuple], damage: dict[str, str], data: st.DataObject) -> None:
        with new_log(backend, server) as url:
            write(url, policy, snapshot_every, script, "exp")
            write(url, policy, 3, other[:25], "other")
            spoil_snapshots(url, "exp", damage)
            check(url, data)

    run()


@pytest.mark.timeout(1200)
def test_read_model_equals_a_full_fold_on_sqlite() -> None:
    _property("sqlite", None, 15)


@pytest.mark.postgres
@pytest.mark.timeout(1200)
def test_read_model_equals_a_full_fold_on_postgres(pg_server_url: str) -> None:
    _property("postgres", pg_server_url, 6)
