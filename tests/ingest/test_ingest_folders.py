"""``trial-replay ingest`` on the committed Ray folders (real runs of Ray 2.40 and 2.60, made
without the callback: tests/data/make_ingest_fixtures.py): the log agrees with Ray's own view,
re-ingesting adds nothing, a resumed experiment adds only what is new."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from statemachine.log import EventStore
from tests.ingest.conftest import (
    VERSIONS,
    assert_agrees_with_ray,
    ingest_json,
    log_events,
    log_trials,
    ray_folder,
    ray_view,
    run_cli,
    tags,
)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", ["faults", "crash"])
def test_the_log_agrees_with_rays_view(version: str, name: str, tmp_path: Path) -> None:
    folder = ray_folder(version, name, tmp_path / name)
    db = tmp_path / "ingested.db"
    report = ingest_json(folder, "--db", db)
    assert report["epoch"] == 1 and report["created_log"]
    # Every trial, its final status and its num_failures, as Ray's ResultGrid had them.
    assert log_trials(db, name) == ray_view(version, name)
    assert {t["trial_id"]: [t["ray_status"], t["ray_num_failures"]]
            for t in report["trials"]} == ray_view(version, name)
    assert all(t["disagreement"] is None and not t["not_added"] for t in report["trials"])
    assert_agrees_with_ray(folder, db, name, ray_view(version, name))


@pytest.mark.parametrize("version", VERSIONS)
def test_failures_are_typed_from_their_text(version: str, tmp_path: Path) -> None:
    folder = ray_folder(version, "faults", tmp_path / "faults")
    db = tmp_path / "ingested.db"
    report = ingest_json(folder, "--db", db)
    # TUNE_RESTORE_RETRY_NUM=2 is saved nowhere: two restore failures that did not count.
    assert report["restore_retry_num_inferred"] == 2
    assert report["policy"]["restore_retry_num"] == 2
    assert report["policy"]["max_failures"] == 1
    ids = tags(folder)
    failures: dict[str, list[tuple[str | None, str | None, str | None]]] = {}
    for e in log_events(db, "faults"):
        if e.type_name == "TrialFailed":
            failures.setdefault(e.trial_id, []).append(
                (e.error_type, e.decision, e.event.error.cause_type))
    assert failures[ids["restore"]] == [
        ("TrainingError", "RECOVER", "builtins.ValueError"),
        ("RestoreError", "RETRY_RESTORE", "builtins.OSError"),
        ("RestoreError", "RETRY_RESTORE", "builtins.OSError"),
        ("RestoreError", "GIVE_UP", "builtins.OSError"),
    ]
    assert failures[ids["errored"]] == [("TrainingError", "RECOVER", "builtins.ValueError"),
                                        ("TrainingError", "GIVE_UP", "builtins.ValueError")]
    assert failures[ids["died"]] == [("ActorError", "RECOVER", "ray.exceptions.ActorDiedError")]
    # Each attempt's node is the one its results name.
    nodes = {e.event.node.node_ip for e in log_events(db, "faults")
             if e.type_name == "TrialStarted"}
    assert nodes and None not in nodes


@pytest.mark.parametrize("version", VERSIONS)
def test_ingesting_again_adds_nothing(version: str, tmp_path: Path) -> None:
    folder = ray_folder(version, "faults", tmp_path / "faults")
    first = ingest_json(folder)  # into the folder's own statemachine.db, as the callback would
    assert first["log"] == f"sqlite:///{folder / 'statemachine.db'}"
    before = log_events(folder / "statemachine.db", "faults")
    again = ingest_json(folder)
    assert again["epoch"] is None and again["events_added"] == 0
    assert all(t["events_added"] == 0 for t in again["trials"])
    assert log_events(folder / "statemachine.db", "faults") == before
    with EventStore.open(folder / "statemachine.db", create=False) as store:
        assert [s.kind for s in store.list_sessions("faults")] == ["ingest"]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_resumed_experiment_adds_only_what_is_new(version: str, tmp_path: Path) -> None:
    """Ingested right after the driver's SIGKILL, then again after Tuner.restore: the same
    history as one ingest of the finished folder, with no event twice."""
    folder = ray_folder(version, "crash-at-kill", tmp_path / "crash")
    db = tmp_path / "incremental.db"
    at_kill = ingest_json(folder, "--db", db)
    assert at_kill["epoch"] == 1
    assert sorted(t["status"] for t in at_kill["trials"]) == ["ERROR", "RUNNING"]
    shutil.rmtree(folder)
    ray_folder(version, "crash", folder)  # the same folder, after Tuner.restore
    resumed = ingest_json(folder, "--db", db)
    assert resumed["epoch"] == 2 and resumed["events_added"] > 0
    assert log_trials(db, "crash") == ray_view(version, "crash")
    fresh = ingest_json(folder, "--db", tmp_path / "fresh.db")
    assert at_kill["events_added"] + resumed["events_added"] == fresh["events_added"]
    events = log_events(db, "crash")
    assert len({e.event_id for e in events}) == len(events)
    assert sorted((e.trial_id, e.type_name, e.payload_json) for e in events) == sorted(
        (e.trial_id, e.type_name, e.payload_json) for e in log_events(tmp_path / "fresh.db",
                                                                      "crash"))
    # The trial that ended ERROR before the kill was resumed (resume_errored=True).
    errored = tags(folder)["e"]
    types = [e.type_name for e in events if e.trial_id == errored]
    assert types[types.index("TrialFailed") + 1] == "TrialReset"
    assert run_cli("--db", db, "verify")[0] == 0
    assert ingest_json(folder, "--db", db)["events_added"] == 0


@pytest.mark.parametrize("version", VERSIONS)
def test_an_error_file_that_reached_storage_late(version: str, tmp_path: Path) -> None:
    """After a SIGKILL Ray's error.txt can lag behind its saved state (it is copied from the
    driver's staging folder later): the log adopts Ray's count and names the disagreement;
    once the file is there, the next ingest adds the failure and agrees with Ray."""
    folder = ray_folder(version, "crash-at-kill", tmp_path / "crash")
    errored = tags(folder)["e"]
    (error,) = folder.glob(f"*{errored}*/error.txt")
    error.unlink()
    db = tmp_path / "log.db"
    trial = next(t for t in ingest_json(folder, "--db", db)["trials"]
                 if t["trial_id"] == errored)
    assert (trial["num_failures"], trial["ray_num_failures"]) == (1, 1)
    assert trial["disagreement"] == "status RUNNING, Ray's ERROR"
    adopted = [e.event for e in log_events(db, "crash")
               if e.trial_id == errored and e.type_name == "CountersAdopted"]
    assert [a.failures for a in adopted] == [1] and "experiment state" in adopted[0].source
    shutil.rmtree(folder)
    ray_folder(version, "crash", folder)
    ingest_json(folder, "--db", db)
    assert log_trials(db, "crash") == ray_view(version, "crash")
    types = [e.type_name for e in log_events(db, "crash") if e.trial_id == errored]
    assert types.count("TrialFailed") == 1
    assert run_cli("--db", db, "verify")[0] == 0


@pytest.mark.parametrize("version", VERSIONS)
def test_a_checkpoint_a_dying_worker_wrote_after_the_ingest_at_the_kill(
    version: str, tmp_path: Path
) -> None:
    """The driver is dead, its trial's worker not yet: it writes one more checkpoint folder
    (workers write checkpoints to storage themselves), which the ingest at the kill records.
    Tuner.restore then starts the trial from Ray's saved state and saves under that same
    name again: the later ingest still adds the resumed attempt (a checkpoint the log holds
    never makes what comes before it look late)."""
    folder = ray_folder(version, "crash-at-kill", tmp_path / "crash")
    running = tags(folder)["s"]
    (trial_folder,) = folder.glob(f"*{running}*")
    (trial_folder / "checkpoint_000004").mkdir()
    (trial_folder / "checkpoint_000004" / "state.json").write_text('{"i": 5}')
    db = tmp_path / "log.db"
    ingest_json(folder, "--db", db)
    shutil.rmtree(folder)
    ray_folder(version, "crash", folder)  # attempt 2's first save is checkpoint_000004
    resumed = ingest_json(folder, "--db", db)
    trial = next(t for t in resumed["trials"] if t["trial_id"] == running)
    assert trial["not_added"] == []
    assert log_trials(db, "crash") == ray_view(version, "crash")
    types = [e.type_name for e in log_events(db, "crash") if e.trial_id == running]
    assert types.count("TrialStarted") == 2 and types.count("TrialResumed") == 1
    assert run_cli("--db", db, "verify")[0] == 0
