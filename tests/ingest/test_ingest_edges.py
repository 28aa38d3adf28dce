"""What Ray leaves half done, and where else a folder lives: a state file cut short, result
rows duplicated or missing, a trial folder gone, an experiment on S3, a PostgreSQL log."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from statemachine.log import EventStore
from statemachine.log.records import INGEST_KIND
from statemachine.log.remote import storage_key
from tests.ingest.conftest import (
    VERSIONS,
    ingest_json,
    log_events,
    log_trials,
    ray_folder,
    ray_view,
    run_cli,
    tags,
)
from tests.s3_server import S3Server

NEWEST = VERSIONS[-1]


def _payloads(db: Path | str, experiment: str) -> list[tuple[str, str, str]]:
    return [(e.trial_id, e.type_name, e.payload_json) for e in log_events(db, experiment)]


def _result_file(folder: Path, tag: str) -> Path:
    trial_id = tags(folder)[tag]
    return next(p for p in folder.glob(f"*{trial_id}*/result.json"))


@pytest.mark.parametrize("version", VERSIONS)
def test_a_half_written_state_file_is_skipped_with_a_warning(
    version: str, tmp_path: Path
) -> None:
    folder = ray_folder(version, "crash", tmp_path / "crash")
    newest = sorted(folder.glob("experiment_state-*.json"))[-1]
    whole = newest.read_bytes()
    newest.write_bytes(whole[: len(whole) // 2])  # Ray rewrites it in place: a copy mid-write
    db = tmp_path / "log.db"
    code, out, err = run_cli("ingest", folder, "--db", db, "--json")
    assert code == 2  # written, with a warning: one line naming the file
    (line,) = err.strip().splitlines()
    assert newest.name in line and "skipped" in line
    report = json.loads(out)
    assert [s["file"] for s in report["skipped_state_files"]] == [newest.name]
    # The older snapshot (the first driver's) and the trial folders still tell the history:
    # both trials ran to the end, their last attempts seen in the results.
    assert report["events_added"] > 0 and run_cli("--db", db, "verify")[0] == 0
    # Once the file is whole again, the next ingest adds what it says, and the log agrees.
    newest.write_bytes(whole)
    ingest_json(folder, "--db", db)
    assert log_trials(db, "crash") == ray_view(version, "crash")


def test_without_any_state_file_the_trials_stay_as_their_files_leave_them(
    tmp_path: Path
) -> None:
    folder = ray_folder(NEWEST, "faults", tmp_path / "faults")
    for state in folder.glob("experiment_state-*.json"):
        state.write_text('{"trial_data": [["{\\"trial_id')  # cut short
    code, out, err = run_cli("ingest", folder, "--db", tmp_path / "log.db", "--json")
    assert code == 2 and "skipped" in err
    trials = {t["trial_id"]: t for t in json.loads(out)["trials"]}
    ids = tags(folder)
    # Failures still end the trials Ray gave up on; the others were last seen running.
    assert trials[ids["errored"]]["status"] == "ERROR"
    assert trials[ids["recovered"]]["status"] == "RUNNING"
    assert trials[ids["recovered"]]["ray_status"] is None


def test_duplicated_result_rows_are_read_once(tmp_path: Path) -> None:
    plain = ray_folder(NEWEST, "faults", tmp_path / "plain" / "faults")
    ingest_json(plain, "--db", tmp_path / "plain.db")
    folder = ray_folder(NEWEST, "faults", tmp_path / "faults")
    rows = _result_file(folder, "recovered")
    lines = rows.read_text().splitlines(keepends=True)
    rows.write_text("".join(line + line for line in lines))
    code, _, err = run_cli("ingest", folder, "--db", tmp_path / "dup.db")
    assert code == 2 and "duplicated" in err and rows.parent.name in err
    assert [(t, n, p.replace(str(folder), "F")) for t, n, p in _payloads(tmp_path / "dup.db",
                                                                         "faults")] == \
        [(t, n, p.replace(str(plain), "F")) for t, n, p in _payloads(tmp_path / "plain.db",
                                                                     "faults")]


def test_missing_and_cut_result_rows(tmp_path: Path) -> None:
    folder = ray_folder(NEWEST, "faults", tmp_path / "faults")
    rows = _result_file(folder, "restore")
    lines = rows.read_text().splitlines(keepends=True)
    # The first two results never reached the file; the last is cut mid-line.
    rows.write_text("".join(lines[2:-1]) + lines[-1][: len(lines[-1]) // 2])
    code, _, err = run_cli("ingest", folder, "--db", tmp_path / "log.db")
    assert code == 2 and "not complete JSON" in err
    assert log_trials(tmp_path / "log.db", "faults") == ray_view(NEWEST, "faults")
    assert run_cli("--db", tmp_path / "log.db", "verify")[0] == 0


def test_a_trial_without_its_folder_is_reported(tmp_path: Path) -> None:
    folder = ray_folder(NEWEST, "faults", tmp_path / "faults")
    errored = tags(folder)["errored"]
    (trial_folder,) = folder.glob(f"*{errored}*")
    for path in sorted(trial_folder.rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    trial_folder.rmdir()
    report = ingest_json(folder, "--db", tmp_path / "log.db")
    trial = next(t for t in report["trials"] if t["trial_id"] == errored)
    # Ray's count is adopted (recorded as such); its ERROR, with no failure to reach it, is
    # reported rather than invented.
    assert trial["num_failures"] == 2 and trial["ray_status"] == "ERROR"
    assert trial["disagreement"] == "status PENDING, Ray's ERROR"
    types = [e.type_name for e in log_events(tmp_path / "log.db", "faults")
             if e.trial_id == errored]
    assert types[-1] == "CountersAdopted"
    assert run_cli("--db", tmp_path / "log.db", "verify")[0] == 0


def test_name_and_a_log_folder(tmp_path: Path) -> None:
    folder = ray_folder(NEWEST, "faults", tmp_path / "faults")
    logs = tmp_path / "logs"
    logs.mkdir()
    report = ingest_json(folder, "--db", logs, "--name", "last week")
    assert report["experiment"] == "last week"
    assert report["log"] == f"sqlite:///{logs / 'statemachine.db'}"
    assert set(log_trials(logs / "statemachine.db", "last week")) == set(
        ray_view(NEWEST, "faults"))
    assert not (folder / "statemachine.db").exists()


def _upload(s3: S3Server, source: Path, bucket: str, prefix: str) -> None:
    fs = s3.filesystem()
    for path in sorted(source.rglob("*")):
        if path.is_file():
            with fs.open_output_stream(f"{bucket}/{prefix}/{path.relative_to(source)}") as out:
                out.write(path.read_bytes())


@pytest.mark.parametrize("version", VERSIONS)
def test_an_experiment_on_s3(version: str, s3_env: S3Server, tmp_path: Path,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    bucket = f"ingest-{uuid.uuid4().hex[:8]}"
    s3_env.make_bucket(bucket)
    _upload(s3_env, ray_folder(version, "faults", tmp_path / "faults"), bucket, "runs/faults")
    uri = f"s3://{bucket}/runs/faults"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    report = ingest_json(uri)  # no --db: where the callback keeps a log for S3 storage
    key = storage_key(s3_env.filesystem(), f"{bucket}/runs/faults")
    assert key.startswith("s3-")
    local = tmp_path / "home" / "ray_results" / key / "statemachine.db"
    assert report["log"] == f"sqlite:///{local}" and report["source"] == uri
    assert log_trials(local, "faults") == ray_view(version, "faults")
    saved = {e.event.checkpoint for e in log_events(local, "faults")
             if e.type_name == "CheckpointSaved"}
    assert saved and all(p.startswith(f"{bucket}/runs/faults/") for p in saved)
    assert ingest_json(uri)["events_added"] == 0
    with EventStore.open(local, create=False) as store:
        (info,) = store.list_experiments()
        assert info.storage_path == uri
    # Nothing was written to the bucket.
    import pyarrow.fs

    listed = s3_env.filesystem().get_file_info(
        pyarrow.fs.FileSelector(f"{bucket}/runs/faults", recursive=True))
    assert not any(i.path.endswith("statemachine.db") for i in listed)


@pytest.mark.postgres
def test_into_postgresql(pg_url: str, tmp_path: Path) -> None:
    folder = ray_folder(NEWEST, "crash", tmp_path / "crash")
    report = ingest_json(folder, "--db", pg_url)
    assert report["epoch"] == 1
    assert log_trials(pg_url, "crash") == ray_view(NEWEST, "crash")
    assert run_cli("--db", pg_url, "verify")[0] == 0
    assert ingest_json(folder, "--db", pg_url)["events_added"] == 0
    with EventStore.open(pg_url, create=False) as store:
        assert [s.kind for s in store.list_sessions("crash")] == [INGEST_KIND]
        times = [e.recorded_at for e in store.read_experiment("crash")]
    assert times == sorted(times) and times[-1].year < 2100


def test_progress_csv_when_result_json_is_missing(tmp_path: Path) -> None:
    plain = ray_folder(NEWEST, "faults", tmp_path / "plain" / "faults")
    ingest_json(plain, "--db", tmp_path / "plain.db")
    folder = ray_folder(NEWEST, "faults", tmp_path / "faults")
    for rows in folder.glob("*/result.json"):
        rows.unlink()
    ingest_json(folder, "--db", tmp_path / "csv.db")
    assert log_trials(tmp_path / "csv.db", "faults") == ray_view(NEWEST, "faults")
    assert [(t, n) for t, n, _ in _payloads(tmp_path / "csv.db", "faults")] == \
        [(t, n) for t, n, _ in _payloads(tmp_path / "plain.db", "faults")]
