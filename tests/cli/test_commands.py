"""What each command tells a person about the fixture log (restore retries across a driver
crash, a preemption, a restart from scratch, a trial given up)."""

from __future__ import annotations

import json
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import EXP, Run, folder_state


def _json(run: Run) -> object:
    assert run.exit_code == 0, run.stderr
    return json.loads(run.stdout)


def _by_trial(rows: object) -> dict[str, dict[str, object]]:
    assert isinstance(rows, list)
    return {r["trial_id"]: r for r in rows}


def test_trials_json_has_the_names_others_rely_on(
    invoke: Callable[..., Run], fixture_db: Path
) -> None:
    rows = _by_trial(_json(invoke("--db", f"sqlite:///{fixture_db}", "trials", EXP, "--json")))
    required = {"trial_id", "status", "num_failures", "num_restore_failures",
                "total_restore_failures", "num_preemptions", "last_error_type"}
    assert all(required <= set(r) for r in rows.values())
    given_up = rows["c_given_up"]
    assert (given_up["status"], given_up["num_failures"], given_up["total_restore_failures"]) == (
        "ERROR", 2, 3)
    assert given_up["last_error_type"] == "RestoreError"
    assert rows["b_preempted_scratch"]["num_preemptions"] == 1
    assert rows["b_preempted_scratch"]["last_decision"] == "RESTART_FROM_SCRATCH"
    assert rows["f_aborted"]["last_error_type"] == "AbortError"
    assert {r["status"] for r in rows.values()} == {"TERMINATED", "ERROR"}


def test_db_accepts_url_file_and_experiment_folder_and_env(
    invoke: Callable[..., Run], experiment_dir: Path, fixture_db: Path
) -> None:
    outputs = {
        invoke("--db", value, "trials", EXP, "--json").stdout
        for value in (f"sqlite:///{fixture_db}", fixture_db, experiment_dir)
    }
    outputs.add(invoke("trials", EXP, "--json",
                       env={"STATEMACHINE_DB_URL": str(experiment_dir)}).stdout)
    assert len(outputs) == 1
    assert "c_given_up" in outputs.pop()


def test_trials_at_a_position_is_the_state_at_the_crash(
    invoke: Callable[..., Run], fixture_db: Path
) -> None:
    lines = invoke("--db", fixture_db, "tail", EXP, "-n", "1000", "--json").stdout.splitlines()
    events = [json.loads(line) for line in lines]
    crash = max(e["position"] for e in events if e["epoch"] == 1)
    rows = _by_trial(_json(invoke("--db", fixture_db, "trials", EXP, "--at", str(crash),
                                  "--json")))
    assert rows["c_given_up"]["status"] == "PENDING"
    assert rows["c_given_up"]["num_restore_failures"] == 1
    assert rows["e_stopped"]["status"] == "RUNNING"
    # The same moment given as a time gives the same states.
    at_time = next(e["recorded_at"] for e in events if e["position"] == crash)
    by_time = _json(invoke("--db", fixture_db, "trials", EXP, "--at", at_time, "--json"))
    assert _by_trial(by_time)["c_given_up"] == rows["c_given_up"]


def test_trials_status_filter(invoke: Callable[..., Run], fixture_db: Path) -> None:
    rows = _json(invoke("--db", fixture_db, "trials", EXP, "--status", "error", "--json"))
    assert sorted(r["trial_id"] for r in rows) == ["c_given_up", "f_aborted"]


def test_trials_table_for_people(invoke: Callable[..., Run], fixture_db: Path) -> None:
    run = invoke("--db", fixture_db, "trials", EXP)
    assert run.exit_code == 0
    for trial in ("a_recovered", "b_preempted_scratch", "c_given_up", "f_aborted"):
        assert trial in run.stdout
    assert "GIVE_UP" in run.stdout and "RESTART_FROM_SCRATCH" in run.stdout


def test_experiments_lists_sessions_with_crashed_and_clean_ends(
    invoke: Callable[..., Run], fixture_db: Path
) -> None:
    rows = _json(invoke("--db", fixture_db, "experiments", "--json"))
    fixture = next(r for r in rows if r["name"] == EXP)
    assert [(s["epoch"], s["end"]) for s in fixture["sessions"]] == [(1, "crashed"), (2, "clean")]
    assert fixture["status_counts"]["ERROR"] == 2
    assert fixture["status_counts"]["TERMINATED"] == 4
    assert fixture["first_event_at"] <= fixture["last_event_at"]
    assert "2 (1 crashed)" in invoke("--db", fixture_db, "experiments").stdout
    assert "1:crashed, 2:clean" in invoke("--db", fixture_db, "experiments", "--wide").stdout


def test_show_is_the_trial_timeline(invoke: Callable[..., Run], fixture_db: Path) -> None:
    events = _json(invoke("--db", fixture_db, "show", EXP, "c_given_up", "--json"))["events"]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    last = events[-1]
    assert (last["error_type"], last["status_before"], last["status_after"], last["decision"]) == (
        "RestoreError", "RESTORING", "ERROR", "GIVE_UP")
    assert last["counters"] == {"failures": 2, "restore_failures": 2,
                                "total_restore_failures": 3, "preemptions": 0}
    assert {e["epoch"] for e in events} == {1, 2}


def test_explain_numbers_restore_failures_across_the_crash(
    invoke: Callable[..., Run], fixture_db: Path
) -> None:
    run = invoke("--db", fixture_db, "explain", EXP, "c_given_up")
    assert run.exit_code == 0
    text = " ".join(run.stdout.split())
    # words first, the place in the log last (issue 29 item 5)
    assert text.startswith("Trial c_given_up is ERROR: it gave up. Restore failure # 3")
    assert (text.index("In all: 2 failure(s)") < text.index(
        "the last failure is seq 11 (position 39).") < text.index("Policy that applied"))
    assert "Restore failure # 1 on node 10.0.0.7 (node-id a7a7a7a7a7a7...) (retry 1 of 2)" in text
    assert "Restore failure # 2 on node 10.0.0.7 (node-id a7a7a7a7a7a7...) (retry 2 of 2)" in text
    # the third attempt's node told only its IP: no node id is made up for it
    assert "Restore failure # 3 on node 10.0.0.8 (restore retries spent: 2 of 2)" in text
    assert ("Decision GIVE_UP: the restore retries are spent and failure 2 exceeds "
            "max_failures 1") in text
    assert "The driver of epoch 1 crashed" in text
    assert "Policy that applied: max_failures=1, restore_retry_num=2" in text
    # Restore failure # 1 comes before the crash, # 2 after it.
    assert text.index("Restore failure # 1") < text.index("crashed") < text.index(
        "Restore failure # 2")


def test_explain_restart_from_scratch_and_preemption(
    invoke: Callable[..., Run], fixture_db: Path
) -> None:
    data = _json(invoke("--db", fixture_db, "explain", EXP, "b_preempted_scratch", "--json"))
    texts = [s["text"] for s in data["steps"]]
    assert any(t.startswith("Preemption # 1") and "not counted as a failure" in t for t in texts)
    scratch = next(s for s in data["steps"] if s["decision"] == "RESTART_FROM_SCRATCH")
    assert ("Restore failure # 3 on node 10.0.0.7 (node-id a7a7a7a7a7a7...) (restore retries "
            "spent: 2 of 2)") in scratch["text"]
    assert data["status"] == "TERMINATED"
    assert data["policy"]["on_restore_exhausted"] == "restart_from_scratch"


def test_explain_says_ray_would_lose_the_restore_counter_only_when_there_was_one(
    invoke: Callable[..., Run], fixture_db: Path
) -> None:
    """Across a driver crash, "Ray itself would have lost the restore counter" is true of a
    trial that had restore failures in its episode, not of one at 0 (issue 29, item 5)."""
    lost = "Ray itself would have lost the restore counter"

    def resumed(trial: str) -> str:
        data = _json(invoke("--db", fixture_db, "explain", EXP, trial, "--json"))
        return next(s["text"] for s in data["steps"] if s["event"] == "DriverResumed")

    assert "restore failures this episode 1" in resumed("c_given_up")
    assert lost in resumed("c_given_up")
    assert "restore failures this episode 0" in resumed("b_preempted_scratch")
    assert lost not in resumed("b_preempted_scratch")


def test_what_if_more_restore_retries_recovers_the_given_up_trial(
    invoke: Callable[..., Run], fixture_db: Path
) -> None:
    data = _json(invoke("--db", fixture_db, "what-if", EXP, "--restore-retry-num", "3",
                        "--json"))
    row = _by_trial(data["trials"])["c_given_up"]
    assert row["recorded"]["outcome"] == "errored"
    assert row["recorded"]["status"] == "ERROR"
    assert row["hypothetical"]["outcome"] == "recovered"
    assert row["hypothetical"]["last_decision"] == "RETRY_RESTORE"
    assert row["changed"] is True
    run = invoke("--db", fixture_db, "what-if", EXP, "--restore-retry-num", "3")
    assert "ERROR (errored" in run.stdout and "PENDING (recovered" in run.stdout


def test_what_if_fewer_failures_errors_the_recovered_trial_and_cuts_its_events(
    invoke: Callable[..., Run], fixture_db: Path
) -> None:
    data = _json(invoke("--db", fixture_db, "what-if", EXP, "--max-failures", "0", "--json"))
    row = _by_trial(data["trials"])["a_recovered"]
    assert row["recorded"]["outcome"] == "recovered"
    assert row["recorded"]["status"] == "TERMINATED"
    assert row["hypothetical"]["outcome"] == "errored"
    assert row["hypothetical"]["status"] == "ERROR"
    assert row["cut_at_seq"] == 6 and row["events_cut"] == 4
    assert "would not have happened" in row["note"]
    unchanged = _by_trial(data["trials"])["d_paused"]
    assert unchanged["changed"] is False and unchanged["cut_at_seq"] is None


def test_what_if_one_trial(invoke: Callable[..., Run], fixture_db: Path) -> None:
    data = _json(invoke("--db", fixture_db, "what-if", EXP, "--max-failures", "-1",
                        "--trial", "c_given_up", "--json"))
    assert [r["trial_id"] for r in data["trials"]] == ["c_given_up"]


def test_verify_passes_on_the_fixture(invoke: Callable[..., Run], fixture_db: Path) -> None:
    run = invoke("--db", fixture_db, "verify")
    assert run.exit_code == 0
    assert "fixture_exp: OK" in run.stdout and "other_exp: OK" in run.stdout
    assert invoke("--db", fixture_db, "verify", EXP).exit_code == 0


def test_export_import_export_is_byte_identical(
    invoke: Callable[..., Run], fixture_db: Path, tmp_path: Path
) -> None:
    first = invoke("--db", fixture_db, "export", EXP)
    assert first.exit_code == 0
    exported = tmp_path / "first.jsonl"
    exported.write_text(first.stdout, encoding="utf-8")
    target = tmp_path / "offline.db"
    run = invoke("--db", target, "import", exported, "--json")
    assert json.loads(run.stdout)["verified"] is True
    second = invoke("--db", target, "export", EXP)
    assert second.stdout.encode() == first.stdout.encode()
    # And the copy answers like the original.
    assert (invoke("--db", target, "trials", EXP, "--json").stdout
            == invoke("--db", fixture_db, "trials", EXP, "--json").stdout)


def test_export_into_a_fifo_writes_into_it_and_leaves_it_a_fifo(
    invoke: Callable[..., Run], fixture_db: Path, tmp_path: Path
) -> None:
    """``-o`` naming something that is not a regular file (``/dev/null``, a FIFO) is written
    into: the export once renamed a file onto ``/dev/null``, replacing the machine's device."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    run = invoke("--db", fixture_db, "export", EXP, "-o", fifo)
    if reader.is_alive():  # the export never opened the FIFO: unblock the reader
        with fifo.open("wb"):
            pass
    reader.join(timeout=30)
    assert run.exit_code == 0, run.stderr
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert received and received[0].decode() == invoke("--db", fixture_db, "export", EXP).stdout
    assert not list(tmp_path.glob(".pipe*"))  # no partial file left


def test_import_under_another_name(
    invoke: Callable[..., Run], fixture_db: Path, tmp_path: Path
) -> None:
    exported = tmp_path / "e.jsonl"
    invoke("--db", fixture_db, "export", EXP, "-o", exported)
    run = invoke("--db", fixture_db, "import", exported, "--as", "fixture_copy")
    assert run.exit_code == 0, run.stderr
    assert invoke("--db", fixture_db, "verify", "fixture_copy").exit_code == 0


@pytest.mark.postgres
def test_copy_a_postgres_log_into_sqlite(
    invoke: Callable[..., Run], fixture_db: Path, tmp_path: Path, pg_url: str
) -> None:
    exported = tmp_path / "e.jsonl"
    invoke("--db", fixture_db, "export", EXP, "-o", exported)
    assert invoke("--db", pg_url, "import", exported).exit_code == 0
    from_pg = invoke("--db", pg_url, "export", EXP)
    assert from_pg.stdout == exported.read_text(encoding="utf-8")
    local = tmp_path / "local.db"
    pg_export = tmp_path / "pg.jsonl"
    pg_export.write_text(from_pg.stdout, encoding="utf-8")
    assert invoke("--db", local, "import", pg_export).exit_code == 0
    assert invoke("--db", local, "export", EXP).stdout == from_pg.stdout
    assert invoke("--db", pg_url, "verify").exit_code == 0


def test_tail_prints_the_latest_events(invoke: Callable[..., Run], fixture_db: Path) -> None:
    lines = invoke("--db", fixture_db, "tail", EXP, "-n", "3", "--json").stdout.splitlines()
    assert len(lines) == 3
    last = json.loads(lines[-1])
    assert (last["trial_id"], last["event"], last["status_after"]) == (
        "e_stopped", "TrialStopped", "TERMINATED")
    text = invoke("--db", fixture_db, "tail", EXP, "-n", "2").stdout
    assert "e_stopped" in text and "TrialStopped" in text


def test_read_commands_write_nothing(
    invoke: Callable[..., Run], experiment_dir: Path, tmp_path: Path
) -> None:
    before = folder_state(experiment_dir)
    for args in (["experiments"], ["trials", EXP], ["trials", EXP, "--at", "10"],
                 ["show", EXP, "c_given_up"], ["explain", EXP, "c_given_up"],
                 ["what-if", EXP, "--max-failures", "3"], ["verify"], ["export", EXP],
                 ["tail", EXP], ["db", "current"]):
        assert invoke("--db", experiment_dir, *args).exit_code == 0, args
    assert folder_state(experiment_dir) == before


def test_db_upgrade_creates_a_log_and_db_current_says_it_is_at_head(
    invoke: Callable[..., Run], tmp_path: Path
) -> None:
    from statemachine.log import EventStore
    from statemachine.log.migrate import head_revision

    folder = tmp_path / "exp"
    folder.mkdir()
    created = _json(invoke("--db", folder, "db", "upgrade", "--json"))
    assert created == {"database": f"sqlite:///{folder / 'statemachine.db'}",
                       "from_revision": None, "revision": head_revision(), "upgraded": True}
    with EventStore.open(folder / "statemachine.db", create=False) as store:
        assert store.list_experiments() == []
    again = _json(invoke("--db", folder, "db", "upgrade", "--json"))
    assert again["from_revision"] == head_revision() and again["upgraded"] is False
    assert "nothing to do" in invoke("--db", folder, "db", "upgrade").stdout
    current = _json(invoke("--db", folder, "db", "current", "--json"))
    assert current == {"database": f"sqlite:///{folder / 'statemachine.db'}",
                       "revision": head_revision(), "head": head_revision(), "is_head": True,
                       "state": "head"}
    assert "up to date" in invoke("--db", folder, "db", "current").stdout


def test_db_current_and_upgrade_of_a_log_from_a_newer_statemachine(
    invoke: Callable[..., Run], fixture_db: Path
) -> None:
    import sqlite3
    from contextlib import closing

    with closing(sqlite3.connect(fixture_db)) as conn, conn:
        conn.execute("UPDATE alembic_version SET version_num = 'f00dfeed0099'")
    current = _json(invoke("--db", fixture_db, "db", "current", "--json"))
    assert (current["revision"], current["is_head"], current["state"]) == (
        "f00dfeed0099", False, "newer")
    assert "upgrade statemachine" in invoke("--db", fixture_db, "db", "current").stdout
    before = folder_state(fixture_db.parent)
    refused = invoke("--db", fixture_db, "db", "upgrade")
    assert refused.exit_code == 2 and "Traceback" not in refused.stderr
    assert "newer than this statemachine knows" in refused.stderr
    assert folder_state(fixture_db.parent) == before


def test_db_upgrade_of_an_empty_database_file(invoke: Callable[..., Run], tmp_path: Path) -> None:
    from statemachine.log.migrate import head_revision

    empty = tmp_path / "empty.db"
    empty.touch()
    current = _json(invoke("--db", empty, "db", "current", "--json"))
    assert (current["revision"], current["state"]) == (None, "none")
    upgraded = _json(invoke("--db", empty, "db", "upgrade", "--json"))
    assert (upgraded["from_revision"], upgraded["revision"]) == (None, head_revision())


def test_db_current_reads_a_log_on_storage_and_upgrade_refuses_it(
    invoke: Callable[..., Run], fixture_db: Path, s3_env: Any
) -> None:
    import uuid

    from statemachine.log.migrate import head_revision
    from statemachine.log.remote import remote_file

    bucket = f"db-{uuid.uuid4().hex[:8]}"
    s3_env.make_bucket(bucket)
    uri = f"s3://{bucket}/exps/fixture_exp"
    remote_file(uri).upload(fixture_db)
    current = _json(invoke("--db", uri, "db", "current", "--json"))
    assert (current["database"], current["revision"], current["state"]) == (
        uri, head_revision(), "head")
    refused = invoke("--db", uri, "db", "upgrade")
    assert refused.exit_code == 2
    assert "cannot write to an event log on storage" in refused.stderr


def _ingested(invoke: Callable[..., Run], tmp_path: Path) -> tuple[Path, str]:
    """A committed Ray folder (run without the callback) ingested into a new log."""
    from tests.ingest.conftest import VERSIONS, ray_folder

    folder = ray_folder(VERSIONS[-1], "faults", tmp_path / "faults")
    db = tmp_path / "ingested.db"
    run = invoke("ingest", folder, "--db", db)
    assert run.exit_code == 0, run.stderr
    assert " ".join(run.stdout.split()).startswith(
        f"Ingested {folder} into sqlite:///{db} as 'faults' (epoch 1)")
    return db, json.loads(invoke("--db", db, "trials", "--json").stdout)[0]["trial_id"]


def test_every_command_reads_an_ingested_log(
    invoke: Callable[..., Run], tmp_path: Path
) -> None:
    db, trial = _ingested(invoke, tmp_path)
    note = "Reconstructed from Ray's files by trial-replay ingest (epoch 1)"
    for args in (["trials"], ["experiments"], ["nodes"], ["verify"], ["what-if", "faults",
                 "--restore-retry-num", "3"], ["timeline", "-o", tmp_path / "t.html"],
                 ["export", "faults"], ["tail", "faults", "-n", "3"]):
        run = invoke("--db", db, *args)
        assert run.exit_code == 0, (args, run.stderr)
    show = " ".join(invoke("--db", db, "show", trial).stdout.split())
    assert "trial-replay ingest of Ray's files" in show and note in show
    # Ray's times are whole seconds: shown with their milliseconds, as any other time.
    assert ".000 " in show and "+00:" not in show
    explain = invoke("--db", db, "explain", trial)
    assert note in " ".join(explain.stdout.split())
    for command in ("show", "explain"):
        data = json.loads(invoke("--db", db, command, trial, "--json").stdout)
        assert data["reconstructed"]["from"] == "ray_files"
        assert data["reconstructed"]["epochs"] == [1]
        assert any("TUNE_RESTORE_RETRY_NUM" in n for n in data["reconstructed"]["not_known"])
    sessions = json.loads(invoke("--db", db, "experiments", "--json").stdout)[0]["sessions"]
    assert [s["kind"] for s in sessions] == ["ingest"]


def test_a_log_written_by_drivers_is_not_called_reconstructed(
    invoke: Callable[..., Run], fixture_db: Path
) -> None:
    for command in ("show", "explain"):
        run = invoke("--db", fixture_db, command, EXP, "c_given_up", "--json")
        assert "reconstructed" not in json.loads(run.stdout)
        text = invoke("--db", fixture_db, command, EXP, "c_given_up").stdout
        assert "Reconstructed" not in text


def test_an_ingested_experiment_exports_and_imports(
    invoke: Callable[..., Run], tmp_path: Path
) -> None:
    """The session kind travels with the export; the import's replay check accepts events
    older than the ingest session that recorded them (they carry Ray's times)."""
    db, _ = _ingested(invoke, tmp_path)
    exported = tmp_path / "faults.jsonl"
    assert invoke("--db", db, "export", "faults", "-o", exported).exit_code == 0
    run = invoke("--db", tmp_path / "copy.db", "import", exported, "--json")
    assert run.exit_code == 0, run.stderr
    assert json.loads(run.stdout)["verified"] is True
    sessions = json.loads(invoke("--db", tmp_path / "copy.db", "experiments", "--json")
                          .stdout)[0]["sessions"]
    assert [s["kind"] for s in sessions] == ["ingest"]
