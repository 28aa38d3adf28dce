"""Text no database encoding can hold never blocks the log (issue 16, item 1).

``os.fsdecode`` / ``os.listdir`` turn a non-UTF-8 file name into a string with lone
surrogates (``b"shard-\\xff.bin"`` -> ``"shard-\\udcff.bin"``). Such text in a trial config, a
checkpoint path or an error message is stored losslessly: the payload's JSON holds the escape
``\\udcff`` and reads back as the very same string (``os.fsencode`` gives the original bytes).
An identifier that can never be stored (a trial id with a lone surrogate or a NUL) is refused
with :class:`UnstorableValueError` and goes to the driver's dead letters at once, without
holding up the events of any other trial. A real Tune run whose grid holds such values logs
every event.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statemachine import (
    CheckpointSaved,
    RestoreError,
    RetryPolicy,
    TrainingError,
    TrialAdded,
    TrialCompleted,
    TrialFailed,
    TrialStarted,
    TrialStopped,
)
from statemachine.exceptions import StoreError, UnstorableValueError
from tests.faults.faultkit import Figures, check_log, read_log
from tests.tune.tunekit import assert_log_matches_ray

pytestmark = [pytest.mark.faults]

NON_UTF8 = [os.fsdecode(b"shard-\xff.bin"), os.fsdecode(b"/mnt/ckpt/\xe9t\xe9/checkpoint_0")]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_url(request: pytest.FixtureRequest) -> str:
    """The same test on a SQLite file and on PostgreSQL (a schema of its own)."""
    return request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")


def test_lone_surrogates_in_payloads_round_trip_exactly(any_url: str) -> None:
    from statemachine.log import EventStore, ExperimentLog, verify

    name, path = NON_UTF8
    with ExperimentLog.open(any_url, "exp", RetryPolicy(max_failures=2)) as log:
        log.record("t1", TrialAdded(config={"shard": name, name: [name]}))
        log.record("t1", TrialStarted())
        log.record("t1", CheckpointSaved(path))
        log.record("t1", TrialFailed(error=TrainingError("builtins.OSError", f"cannot read {name}",
                                                         f"Traceback: {path}")))
        log.record("t1", TrialStarted(restore_from=path))
        log.record("t1", TrialFailed(error=RestoreError("builtins.OSError", name)))
        log.record("t1", TrialStarted(restore_from=path))
        log.record("t1", TrialStopped(reason=name))
    with EventStore.open(any_url, create=False) as store:
        rows = store.read_trial("exp", "t1")
        assert len(rows) == 9  # PolicySet + the 8 recorded: nothing held up, nothing lost
        for row in rows:
            row.payload_json.encode("utf-8")  # stored as valid UTF-8 text ...
        assert "\\udcff" in rows[1].payload_json  # ... with the readable JSON escape
        events = [row.event for row in rows]
        assert events[1] == TrialAdded(config={"shard": name, name: [name]})
        assert os.fsencode(events[1].config["shard"]) == b"shard-\xff.bin"
        assert events[3] == CheckpointSaved(path)
        assert os.fsencode(events[3].checkpoint) == b"/mnt/ckpt/\xe9t\xe9/checkpoint_0"
        failed = events[4]
        assert isinstance(failed, TrialFailed)
        assert failed.error.message == f"cannot read {name}"
        assert failed.error.traceback == f"Traceback: {path}"
        assert events[8] == TrialStopped(reason=name)
        assert verify(store, "exp").ok
    # A new driver rehydrates the same text from the snapshot the clean close wrote.
    with ExperimentLog.open(any_url, "exp", RetryPolicy(max_failures=2)) as log:
        state = log.state("t1")
        assert state is not None and state.checkpoints == (path,)
        assert state.last_error == RestoreError("builtins.OSError", name)


@pytest.mark.parametrize("trial_id", [os.fsdecode(b"t-\xff"), "t\x00nul", "x" * 256, ""])
def test_an_unstorable_identifier_is_refused_and_nothing_is_written(
    any_url: str, trial_id: str
) -> None:
    from statemachine.log import EventStore, ExperimentLog, verify

    with ExperimentLog.open(any_url, "exp", RetryPolicy()) as log:
        log.record("good", TrialAdded())
        with pytest.raises(UnstorableValueError, match="trial id"):
            log.record(trial_id, TrialAdded())
        assert log.state(trial_id) is None  # the live state did not move either
        log.record("good", TrialStarted())  # the log is as usable as before
    with EventStore.open(any_url, create=False) as store:
        assert store.list_trials("exp") == ["good"]
        assert [r.type_name for r in store.read_trial("exp", "good")] == [
            "TrialAdded", "TrialStarted",
        ]
        assert verify(store, "exp").ok
        # Reading with such a value is a clear error too, never a raw UnicodeEncodeError.
        with pytest.raises(StoreError):
            store.read_trial("exp", os.fsdecode(b"t-\xff"))


def test_an_experiment_name_from_a_non_utf8_folder_is_stored_readably(any_url: str) -> None:
    from statemachine.log import EventStore, ExperimentLog
    from statemachine.log.records import storable_name

    folder = os.fsdecode(b"exp-\xff")
    with pytest.raises(UnstorableValueError, match="experiment name"):
        ExperimentLog.open(any_url, folder, RetryPolicy())
    name = storable_name(folder)
    assert name == "exp-\\xff" and storable_name(folder) == name  # readable, and stable
    with ExperimentLog.open(any_url, name, RetryPolicy(), storage_path=f"/results/{folder}") as log:
        log.record("t", TrialAdded())
    with EventStore.open(any_url, create=False) as store:
        (info,) = store.list_experiments()
        assert (info.name, info.storage_path) == (name, "/results/exp-\\xff")


def test_the_recorder_dead_letters_an_unstorable_event_and_writes_the_others(
    sqlite_url: str, tmp_path: Path
) -> None:
    from statemachine.log import ExperimentLog
    from statemachine.tune.recorder import Recorder

    policy = RetryPolicy(max_failures=1)
    recorder = Recorder(lambda: ExperimentLog.open(sqlite_url, "exp", policy), policy,
                        backoff_s=0.0)
    bad = os.fsdecode(b"trial-\xff")
    recorder.record("a", TrialAdded())
    recorder.record(bad, TrialAdded())  # never storable
    recorder.record("a", TrialStarted())
    recorder.record("b", TrialAdded(config={"file": NON_UTF8[0]}))
    recorder.record("a", TrialCompleted())
    assert recorder.flush(force=True) == 0  # nothing stays queued behind the bad event
    # The bad trial's two events (its PolicySet and TrialAdded), and nothing else.
    assert [(p.trial_id, p.event.type_name) for p, _ in recorder.dead] == [
        (bad, "PolicySet"), (bad, "TrialAdded"),
    ]
    assert all("lone surrogate" in reason for _, reason in recorder.dead)
    assert recorder.write_failures == 0  # refused at once: no retries, no cool-down
    saved = recorder.save_unwritten(tmp_path / "unwritten.jsonl")
    assert saved is not None
    lines = saved.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["trial_id"] for line in lines] == [bad, bad]  # saved exactly
    recorder.close()
    log = read_log(sqlite_url, "exp")
    assert sorted((r.trial_id, r.type_name) for r in log.rows if r.type_name != "PolicySet") == [
        ("a", "TrialAdded"), ("a", "TrialCompleted"), ("a", "TrialStarted"), ("b", "TrialAdded"),
    ]


# ------------------------------------------------------------------ a real Tune run


@pytest.mark.ray
@pytest.mark.slow
def test_tune_run_with_non_utf8_grid_values_logs_every_event(
    ray_cluster: None, tmp_path: Path, reliability: Callable[[Figures], None]
) -> None:
    """Three trials whose grid values are non-UTF-8 file names: every event is in the log.

    Before the fix the first such event (the trial's ``TrialAdded``, whose config holds the
    value) blocked the recorder's queue, and a run like this one logged 1 of its events.
    (Ray itself sanitizes trial folder names and cannot store checkpoints under a non-UTF-8
    path: pyarrow refuses it; such checkpoint paths are covered at the store level above.)
    """
    from ray import tune

    from statemachine.tune import CheckpointConfig, EventLogCallback, FailureConfig, RunConfig
    from tests.tune.tune_trainables import Flaky

    tags = [os.fsdecode(b"shard-\xff.bin"), os.fsdecode(b"shard-\xfe.bin"), "shard-ok.bin"]
    ctl = tmp_path / "ctl"
    ctl.mkdir()
    callback = EventLogCallback()
    grid = tune.Tuner(
        Flaky,
        param_space={"ctl": str(ctl), "iters": 3,
                     "variant": tune.grid_search([{"tag": tags[0], "fail_at": 2},
                                                  {"tag": tags[1]}, {"tag": tags[2]}])},
        run_config=RunConfig(
            name="hostile_text", storage_path=str(tmp_path / "results"), callbacks=[callback],
            verbose=0, failure_config=FailureConfig(max_failures=1),
            checkpoint_config=CheckpointConfig(checkpoint_frequency=1),
        ),
    ).fit()
    assert not grid.errors
    url = f"sqlite:///{tmp_path / 'results' / 'hostile_text' / 'statemachine.db'}"
    summary = callback.summary()
    assert summary["unwritten"] == 0 and summary["rejected"] == 0, summary
    assert summary["hook_errors"] == 0, summary

    log = read_log(url, "hostile_text")
    assert summary["recorded"] == len(log.rows)
    configs = {r.event.config["variant"]["tag"] for r in log.rows if r.type_name == "TrialAdded"}
    assert configs == set(tags)  # exactly the strings Ray had

    assert_log_matches_ray(url, "hostile_text", grid)
    # Every event the driver folded is stored, exactly once, and the log verifies.
    check_log(
        url, "hostile_text",
        scenario="Non-UTF-8 text in a Tune run",
        injected="3 trials whose grid values are non-UTF-8 file names (lone surrogates), so "
                 "their configs, checkpoint paths and folder names hold them",
        times=3,
        expected={},
        found=lambda _log: {},
        shadow=callback._recorder.states if callback._recorder else None,
        reliability=reliability,
    )


# ------------------------------------------------------------------ fuzz: exact round trip


def test_fuzz_any_event_with_hostile_text_round_trips_through_a_real_store(
    tmp_path: Path,
) -> None:
    """Events built from arbitrary text (surrogates, controls, markup, 1 MB strings) are
    stored and read back exactly, on a real SQLite file; none is refused, none blocks."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from statemachine.domain.events import TrialStopped
    from statemachine.log import EventStore
    from tests.domain.domain_strategies import any_event, hostile_text

    huge = hostile_text(max_size=8, min_size=1).map(lambda chunk: chunk * (2**20 // len(chunk)))
    store = EventStore.open(tmp_path / "fuzz.db")
    session = store.start_session("fuzz", policy=RetryPolicy())
    last: dict[str, int] = {}

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(event=any_event | huge.map(lambda reason: TrialStopped(reason=reason)),
           trial_id=st.sampled_from(["t1", "t2"]))
    def round_trip(event: Any, trial_id: str) -> None:
        stored = store.append(session, trial_id, event, expected_seq=last.get(trial_id, 0))
        last[trial_id] = stored.seq
        (again,) = store.read_trial("fuzz", trial_id, upto_seq=stored.seq)[-1:]
        assert again.event == event
        again.payload_json.encode("utf-8")

    try:
        round_trip()
    finally:
        store.close()
