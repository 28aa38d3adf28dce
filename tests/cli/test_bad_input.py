"""Every bad input of the issue: one clear line on stderr, exit 2 (1 for a failed verify),
no traceback, nothing written."""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest

from tests.cli.conftest import EXP, Run, folder_state


def assert_one_line_error(run: Run, *fragments: str, code: int = 2) -> str:
    """The run failed with ``code`` and one stderr line naming ``fragments``."""
    assert run.exit_code == code, (run.exit_code, run.stdout, run.stderr)
    assert "Traceback" not in run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("trial-replay: ")
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def corrupt(db: Path, trial_id: str, seq: int) -> int:
    """Break one event row's payload (as a disk or a hand edit would); return its position."""
    with closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("UPDATE events SET payload = '{\"error\": [broken' "
                     "WHERE trial_id = ? AND seq = ?", (trial_id, seq))
        (position,) = conn.execute("SELECT position FROM events WHERE trial_id = ? AND seq = ?",
                                   (trial_id, seq)).fetchone()
    return int(position)


def test_missing_file(invoke: Callable[..., Run], tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "events.db"
    run = invoke("--db", missing, "trials", EXP)
    assert_one_line_error(run, str(missing))
    assert not missing.exists() and not missing.parent.exists()


def test_missing_file_as_sqlite_url(invoke: Callable[..., Run], tmp_path: Path) -> None:
    missing = tmp_path / "events.db"
    run = invoke("--db", f"sqlite:///{missing}", "experiments")
    assert_one_line_error(run, "no event log", str(missing))
    assert list(tmp_path.iterdir()) == []


def test_folder_without_a_log(invoke: Callable[..., Run], tmp_path: Path) -> None:
    run = invoke("--db", tmp_path, "experiments")
    assert_one_line_error(run, "no event log in folder", "statemachine.db")
    assert list(tmp_path.iterdir()) == []


def test_no_db_given(invoke: Callable[..., Run]) -> None:
    assert_one_line_error(invoke("experiments"), "--db", "STATEMACHINE_DB_URL")


def test_unsupported_database(invoke: Callable[..., Run]) -> None:
    for args in (["experiments"], ["db", "current"], ["db", "upgrade"]):
        run = invoke("--db", "mysql+pymysql://me:secret@127.0.0.1/test", *args)
        line = assert_one_line_error(run, "SQLite and PostgreSQL", "mysql", "sqlite:///")
        assert "secret" not in line


def test_db_upgrade_without_a_db(invoke: Callable[..., Run]) -> None:
    assert_one_line_error(invoke("db", "upgrade"), "db upgrade needs a target store",
                          "STATEMACHINE_DB_URL")


def test_unreachable_server(invoke: Callable[..., Run]) -> None:
    run = invoke("--db", "postgresql+psycopg://postgres@127.0.0.1:1/test", "experiments")
    assert_one_line_error(run, "127.0.0.1")


def test_database_that_is_not_ours(invoke: Callable[..., Run], tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    with closing(sqlite3.connect(other)) as conn, conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    before = folder_state(tmp_path)
    assert_one_line_error(invoke("--db", other, "experiments"), "not a statemachine event log")
    assert folder_state(tmp_path) == before


def test_file_that_is_not_a_database(invoke: Callable[..., Run], tmp_path: Path) -> None:
    text = tmp_path / "notes.db"
    text.write_text("these are my notes, not a database\n" * 100)
    before = folder_state(tmp_path)
    assert_one_line_error(invoke("--db", text, "experiments"), "notes.db")
    assert folder_state(tmp_path) == before


def test_database_newer_than_the_code(invoke: Callable[..., Run], fixture_db: Path) -> None:
    with closing(sqlite3.connect(fixture_db)) as conn, conn:
        conn.execute("UPDATE alembic_version SET version_num = 'f00dfeedbeef'")
    before = folder_state(fixture_db.parent)
    run = invoke("--db", fixture_db, "trials", EXP)
    assert_one_line_error(run, "newer", "f00dfeedbeef", "upgrade statemachine")
    assert folder_state(fixture_db.parent) == before


@pytest.mark.parametrize("args", [
    ["trials", "fixtur_exp"], ["show", "fixture_ex", "c_given_up"], ["what-if", "Fixture_exp",
    "--max-failures", "2"], ["verify", "fixture_exq"], ["export", "fixture-exp"],
    ["timeline", "fixtureexp", "-o", "t.svg"], ["tail", "fixture_exp2"],
])
def test_unknown_experiment_suggests_the_nearest(
    invoke: Callable[..., Run], experiment_dir: Path, args: list[str]
) -> None:
    before = folder_state(experiment_dir)
    line = assert_one_line_error(invoke("--db", experiment_dir, *args), "did you mean",
                                 "'fixture_exp'")
    assert args[1] in line
    assert folder_state(experiment_dir) == before


@pytest.mark.parametrize("command", ["show", "explain"])
def test_unknown_trial_suggests_the_nearest(
    invoke: Callable[..., Run], fixture_db: Path, command: str
) -> None:
    run = invoke("--db", fixture_db, command, EXP, "c_givenup")
    assert_one_line_error(run, "no trial 'c_givenup'", "did you mean 'c_given_up'")


def test_unknown_trial_in_what_if(invoke: Callable[..., Run], fixture_db: Path) -> None:
    run = invoke("--db", fixture_db, "what-if", EXP, "--max-failures", "1", "--trial", "a_recoverd")
    assert_one_line_error(run, "'a_recovered'")


def drop_snapshot(db: Path, trial_id: str) -> None:
    """Remove a trial's snapshot, so that listings fold its history (as for a log whose
    driver died before it saved one)."""
    with closing(sqlite3.connect(db)) as conn, conn:
        assert conn.execute("DELETE FROM snapshots WHERE trial_id = ?", (trial_id,)).rowcount


def test_corrupted_row_is_reported_and_the_rest_is_shown(
    invoke: Callable[..., Run], fixture_db: Path
) -> None:
    position = corrupt(fixture_db, "c_given_up", 9)
    drop_snapshot(fixture_db, "c_given_up")
    run = invoke("--db", fixture_db, "trials", EXP, "--json")
    line = assert_one_line_error(run, f"position {position}", "c_given_up", "seq 9")
    assert "shown as of seq 8" in line
    rows = {r["trial_id"]: r for r in json.loads(run.stdout)}
    assert len(rows) == 6  # every other trial is still there
    assert rows["c_given_up"]["seq"] == 8 and rows["c_given_up"]["status"] == "RESTORING"
    assert rows["a_recovered"]["status"] == "TERMINATED"


def test_corrupted_row_behind_a_snapshot_is_for_verify(
    invoke: Callable[..., Run], fixture_db: Path
) -> None:
    """Listings read each trial's state (its snapshot), not its history: a row broken behind
    the log's back before an up-to-date snapshot leaves the listing as recorded, and the
    commands that read history (``verify``, ``show``) name it."""
    position = corrupt(fixture_db, "c_given_up", 9)
    run = invoke("--db", fixture_db, "trials", EXP, "--json")
    assert run.exit_code == 0, run.stderr
    rows = {r["trial_id"]: r for r in json.loads(run.stdout)}
    assert len(rows) == 6
    assert (rows["c_given_up"]["seq"], rows["c_given_up"]["status"]) == (11, "ERROR")
    verify = invoke("--db", fixture_db, "verify", EXP)
    assert verify.exit_code != 0 and f"position {position}" in verify.stdout + verify.stderr
    shown = invoke("--db", fixture_db, "show", EXP, "c_given_up")
    assert_one_line_error(shown, f"position {position}")


def test_corrupted_row_in_show_keeps_the_recorded_columns(
    invoke: Callable[..., Run], fixture_db: Path
) -> None:
    corrupt(fixture_db, "c_given_up", 9)
    data = json.loads(invoke("--db", fixture_db, "show", EXP, "c_given_up", "--json").stdout)
    broken = next(e for e in data["events"] if e["seq"] == 9)
    assert (broken["status_after"], broken["decision"], broken["error_cause"]) == (
        "PENDING", "RETRY_RESTORE", None)


def test_corrupted_row_in_explain(invoke: Callable[..., Run], fixture_db: Path) -> None:
    position = corrupt(fixture_db, "c_given_up", 9)
    run = invoke("--db", fixture_db, "explain", EXP, "c_given_up")
    assert_one_line_error(run, f"position {position}")
    assert "Restore failure # 1 on node 10.0.0.7 (node-id a7a7a7a7a7a7...) (retry 1 of 2)" in (
        " ".join(run.stdout.split()))


def test_verify_fails_with_exit_1_at_the_first_divergence(
    invoke: Callable[..., Run], fixture_db: Path
) -> None:
    position = corrupt(fixture_db, "c_given_up", 9)
    run = invoke("--db", fixture_db, "verify")
    assert_one_line_error(run, "verify failed", f"position {position}", "c_given_up",
                          code=1)
    assert "fixture_exp: DIVERGED" in run.stdout and "other_exp: OK" in run.stdout
    data = json.loads(invoke("--db", fixture_db, "verify", EXP, "--json").stdout)
    assert data["ok"] is False
    assert data["experiments"][0]["divergence"]["position"] == position


def test_verify_fails_on_a_recorded_decision_the_fold_does_not_reproduce(
    invoke: Callable[..., Run], fixture_db: Path
) -> None:
    with closing(sqlite3.connect(fixture_db)) as conn, conn:
        conn.execute("UPDATE events SET decision = 'RECOVER' WHERE trial_id = 'c_given_up' "
                     "AND seq = 11")
    run = invoke("--db", fixture_db, "verify", EXP)
    assert_one_line_error(run, "decision", "'RECOVER'", "'GIVE_UP'", code=1)


def test_verify_fails_on_a_seq_gap(invoke: Callable[..., Run], fixture_db: Path) -> None:
    with closing(sqlite3.connect(fixture_db)) as conn, conn:
        conn.execute("UPDATE events SET seq = 40 WHERE trial_id = 'e_stopped' AND seq = "
                     "(SELECT max(seq) FROM events WHERE trial_id = 'e_stopped')")
    run = invoke("--db", fixture_db, "verify", EXP, "--json")
    assert run.exit_code == 1
    gaps = json.loads(run.stdout)["experiments"][0]["gaps"]
    assert gaps and gaps[0]["trial_id"] == "e_stopped" and gaps[0]["next_seq"] == 40


def test_corrupted_row_in_export_is_kept_raw(
    invoke: Callable[..., Run], fixture_db: Path, tmp_path: Path
) -> None:
    corrupt(fixture_db, "c_given_up", 9)
    run = invoke("--db", fixture_db, "export", EXP)
    assert_one_line_error(run, "payload_raw")
    broken = [json.loads(x) for x in run.stdout.splitlines() if "payload_raw" in x]
    assert len(broken) == 1 and broken[0]["payload_raw"] == '{"error": [broken'
    exported = tmp_path / "e.jsonl"
    exported.write_text(run.stdout)
    target = tmp_path / "copy.db"
    refused = invoke("--db", target, "import", exported)  # its replay diverges at that row
    assert refused.exit_code == 1 and "--force" in refused.stderr and not target.exists()
    forced = invoke("--db", target, "import", "--force", exported)
    assert forced.exit_code == 0 and "DIVERGED" in forced.stdout and "position" in forced.stderr
    assert invoke("--db", target, "export", EXP).stdout == run.stdout


@pytest.mark.parametrize(("args", "fragment"), [
    (["trials", EXP, "--at", "yesterday"], "'--at': takes an event position"),
    (["trials", EXP, "--at", "-3"], "'--at': position must be between 0 and 2**63-1"),
    # Absurd values (issue 16, item 8): refused by the option's type, never a traceback.
    (["trials", EXP, "--at", "9999-12-31T23:59:59-14:00"], "in years 1 to 9999 UTC"),
    (["trials", EXP, "--at", "0001-01-01T00:00:00+14:00"], "in years 1 to 9999 UTC"),
    (["trials", EXP, "--at", "99999999999999999999999"], "position must be between"),
    (["trials", EXP, "--at", "\u00b2"], "'--at': takes an event position"),
    (["tail", EXP, "-n", "99999999999999999999999"], "'--lines'"),
    (["tail", EXP, "-n", "-1"], "'--lines'"),
    (["tail", EXP, "-f", "--interval", "nan"], "'--interval': 'nan' is not a finite number"),
    (["tail", EXP, "-f", "--interval", "inf"], "'--interval': 'inf' is not a finite number"),
    (["tail", EXP, "-f", "--interval", "-inf"], "'--interval'"),
    (["tail", EXP, "-f", "--interval", "1e400"], "'--interval'"),
    (["tail", EXP, "-f", "--interval", "0"], "'--interval'"),
    (["what-if", EXP, "--max-failures", "99999999999999999999"], "'--max-failures'"),
    (["what-if", EXP, "--restore-retry-num", "99999999999999999999"], "'--restore-retry-num'"),
    (["timeline", EXP, "-o", "/proc/t.html"], "cannot write the timeline to /proc/t.html"),
    (["trials", EXP, "--status", "DONE"], "--status"),
    (["what-if", EXP], "needs at least one policy change"),
    (["what-if", EXP, "--restore-retry-num", "-1"], "-1 is not in the range"),
    (["what-if", EXP, "--on-restore-exhausted", "pray"], "--on-restore-exhausted"),
    (["timeline", EXP, "-o", "pic.jpg"], "must end in .html, .svg or .png"),
    (["timeline", EXP, "-o", "no/such/folder/t.svg"], "no such folder"),
    (["diagram", "-o", "machine.pdf"], "must end in .svg, .png or .dot"),
    (["show"], "Missing argument 'TRIAL'"),
    (["frobnicate"], "No such command"),
])
def test_bad_options(
    invoke: Callable[..., Run], experiment_dir: Path, args: list[str], fragment: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(experiment_dir)
    before = folder_state(experiment_dir)
    assert_one_line_error(invoke("--db", experiment_dir, *args), fragment)
    assert folder_state(experiment_dir) == before


def test_import_of_a_malformed_file_writes_nothing(
    invoke: Callable[..., Run], fixture_db: Path, tmp_path: Path
) -> None:
    exported = tmp_path / "e.jsonl"
    invoke("--db", fixture_db, "export", EXP, "-o", exported)
    lines = exported.read_text().splitlines()
    lines[10] = lines[10][:-5]
    exported.write_text("\n".join(lines) + "\n")
    target = tmp_path / "target.db"
    assert_one_line_error(invoke("--db", target, "import", exported), "line 11",
                          "not valid JSON", "nothing was imported")
    assert not target.exists()


def test_import_of_a_file_with_a_seq_gap_writes_nothing(
    invoke: Callable[..., Run], fixture_db: Path, tmp_path: Path
) -> None:
    exported = tmp_path / "e.jsonl"
    invoke("--db", fixture_db, "export", EXP, "-o", exported)
    lines = [x for x in exported.read_text().splitlines()
             if not ('"trial_id":"d_paused"' in x and '"seq":3,' in x)]
    exported.write_text("\n".join(lines) + "\n")
    target = tmp_path / "target.db"
    assert_one_line_error(invoke("--db", target, "import", exported), "d_paused", "seq 4")
    assert not target.exists()


def test_import_into_a_store_that_has_the_experiment(
    invoke: Callable[..., Run], fixture_db: Path, tmp_path: Path
) -> None:
    exported = tmp_path / "e.jsonl"
    invoke("--db", fixture_db, "export", EXP, "-o", exported)
    before = folder_state(fixture_db.parent)
    assert_one_line_error(invoke("--db", fixture_db, "import", exported), "already exists",
                          "--as NAME")
    assert folder_state(fixture_db.parent) == before


def test_import_of_a_missing_file(invoke: Callable[..., Run], tmp_path: Path) -> None:
    assert_one_line_error(invoke("--db", tmp_path / "t.db", "import", tmp_path / "none.jsonl"),
                          "none.jsonl")
    assert list(tmp_path.iterdir()) == []


def test_folder_copy_is_untouched_after_every_error(
    invoke: Callable[..., Run], experiment_dir: Path
) -> None:
    """The whole series above never leaves a -wal/-shm or journal file behind."""
    before = folder_state(experiment_dir)
    for args in (["show", EXP, "zzz"], ["trials", "zzz"], ["what-if", EXP]):
        invoke("--db", experiment_dir, *args)
    assert folder_state(experiment_dir) == before
    shutil.rmtree(experiment_dir)


def test_row_that_does_not_fold_is_reported_and_the_rest_is_shown(
    invoke: Callable[..., Run], fixture_db: Path
) -> None:
    """A row rewritten into an event that is impossible where the trial is (PENDING ->
    TrialCompleted): every reader names its position and goes on with the other trials."""
    with closing(sqlite3.connect(fixture_db)) as conn, conn:
        conn.execute("UPDATE events SET type_name = 'TrialCompleted', version = 1, "
                     "payload = '{}' WHERE trial_id = 'c_given_up' AND seq = 6")
        (position,) = conn.execute("SELECT position FROM events WHERE trial_id = 'c_given_up' "
                                   "AND seq = 6").fetchone()
    drop_snapshot(fixture_db, "c_given_up")
    run = invoke("--db", fixture_db, "trials", EXP, "--json")
    line = assert_one_line_error(run, f"position {position}", "does not fold",
                                 "'TrialCompleted' is not valid in state PENDING")
    assert "shown as of seq 5" in line
    rows = {r["trial_id"]: r for r in json.loads(run.stdout)}
    assert rows["c_given_up"]["seq"] == 5 and rows["b_preempted_scratch"]["seq"] == 17
    explained = invoke("--db", fixture_db, "explain", EXP, "c_given_up")
    assert_one_line_error(explained, f"position {position}")
    assert "Decision RECOVER" in " ".join(explained.stdout.split())
    what_if = invoke("--db", fixture_db, "what-if", EXP, "--max-failures", "5", "--json")
    assert_one_line_error(what_if, f"position {position}")
    assert len(json.loads(what_if.stdout)["trials"]) == 6
    verify = invoke("--db", fixture_db, "verify", EXP)
    assert_one_line_error(verify, f"position {position}", "transition", code=1)


@pytest.mark.parametrize("backend", ["sqlite",
                                     pytest.param("postgres", marks=pytest.mark.postgres)])
def test_an_import_interrupted_after_it_wrote_leaves_no_new_log_behind(
    invoke: Callable[..., Run], fixture_db: Path, tmp_path: Path, backend: str,
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from statemachine.log import EventStore
    from statemachine.log.store import schema_revision

    exported = tmp_path / "e.jsonl"
    invoke("--db", fixture_db, "export", EXP, "-o", exported)
    target = (str(request.getfixturevalue("pg_url")) if backend == "postgres"
              else str(tmp_path / "target.db"))
    real_import = EventStore.import_experiment

    def import_then_ctrl_c(self: EventStore, *args: object, **kwargs: object) -> str:
        real_import(self, *args, **kwargs)  # type: ignore[arg-type]
        raise KeyboardInterrupt  # the user's Ctrl-C, after the import's transaction

    monkeypatch.setattr(EventStore, "import_experiment", import_then_ctrl_c)
    try:
        code = invoke("--db", target, "import", exported).exit_code
    except KeyboardInterrupt:
        code = 130
    assert code != 0
    monkeypatch.undo()
    if backend == "sqlite":
        assert [p.name for p in tmp_path.glob("target.db*")] == []  # no file, -wal, -shm
    else:
        assert schema_revision(target) is None  # no tables, no version stamp
        import sqlalchemy

        with sqlalchemy.create_engine(target).connect() as conn:
            assert sqlalchemy.inspect(conn).get_table_names() == []
    # And the same import, uninterrupted, works into the same place.
    assert invoke("--db", target, "import", exported).exit_code == 0


# ------------------------------------------------------------------ ingest


def _ray_folder(tmp_path: Path, name: str = "faults") -> Path:
    from tests.ingest.conftest import VERSIONS, ray_folder

    return ray_folder(VERSIONS[-1], name, tmp_path / name)


@pytest.mark.parametrize("make", ["empty", "files", "file", "missing"])
def test_ingest_of_a_folder_that_is_not_a_ray_experiment(
    invoke: Callable[..., Run], tmp_path: Path, make: str
) -> None:
    target = tmp_path / "not-ray"
    if make in ("empty", "files"):
        target.mkdir()
    if make == "files":
        (target / "notes.txt").write_text("hello")
        (target / "data").mkdir()
        (target / "data" / "x.csv").write_text("a,b\n")
    if make == "file":
        target.write_text("hello")
    before = folder_state(tmp_path)
    run = invoke("ingest", target, "--db", tmp_path / "log.db")
    expected = {"empty": "is not a Ray Tune experiment folder",
                "files": "is not a Ray Tune experiment folder",
                "file": "is a file, not a folder", "missing": "does not exist"}[make]
    assert_one_line_error(run, str(target), expected)
    assert folder_state(tmp_path) == before  # nothing written, no log created
    assert not (tmp_path / "log.db").exists()


def test_ingest_of_the_results_folder_names_the_experiments_in_it(
    invoke: Callable[..., Run], tmp_path: Path
) -> None:
    _ray_folder(tmp_path, "faults")
    _ray_folder(tmp_path, "crash")
    before = folder_state(tmp_path)
    run = invoke("ingest", tmp_path)
    assert_one_line_error(run, "is not a Ray Tune experiment folder but holds 2: crash, faults",
                          f"trial-replay ingest {tmp_path}/crash")
    assert folder_state(tmp_path) == before


def _callback_log(path: Path, experiment: str) -> None:
    """A log as the EventLogCallback writes it: a driver session (``fresh``) and an event."""
    from statemachine.domain.events import TrialAdded
    from statemachine.domain.policy import RetryPolicy
    from statemachine.log import EventStore

    with EventStore.open(path) as store:
        session = store.start_session(experiment, policy=RetryPolicy(), kind="fresh")
        store.append(session, "t1", TrialAdded(), expected_seq=0)
        store.end_session(session)


@pytest.mark.parametrize("target", ["folder", "elsewhere"])
def test_ingest_refuses_an_experiment_the_callback_recorded(
    invoke: Callable[..., Run], tmp_path: Path, target: str
) -> None:
    folder = _ray_folder(tmp_path)
    _callback_log(folder / "statemachine.db", "faults")
    before = folder_state(tmp_path)
    args = [] if target == "folder" else ["--db", tmp_path / "other.db"]
    run = invoke("ingest", folder, *args)
    assert_one_line_error(run, "experiment 'faults'", "was recorded by the EventLogCallback",
                          "driver epoch(s) 1", "nothing was ingested",
                          f"trial-replay --db {folder} trials faults")
    assert folder_state(tmp_path) == before


def test_ingest_refuses_a_target_log_where_the_callback_recorded_the_experiment(
    invoke: Callable[..., Run], tmp_path: Path
) -> None:
    folder = _ray_folder(tmp_path)
    _callback_log(tmp_path / "shared.db", "faults")
    before = folder_state(tmp_path)
    run = invoke("ingest", folder, "--db", tmp_path / "shared.db")
    assert_one_line_error(run, "was recorded by the EventLogCallback")
    assert folder_state(tmp_path) == before
    # Under another name it is a separate experiment of that log: ingested beside it.
    assert invoke("ingest", folder, "--db", tmp_path / "shared.db", "--name",
                  "faults-ingested").exit_code == 0


def test_ingest_refuses_error_files_the_callback_rewrote(
    invoke: Callable[..., Run], tmp_path: Path
) -> None:
    folder = _ray_folder(tmp_path)
    error = next(folder.glob("*/error.txt"))
    lines = error.read_text().splitlines(keepends=True)
    lines[0] = lines[0].rstrip("\n") + " [TrainingError; decision RECOVER]\n"
    error.write_text("".join(lines))
    before = folder_state(tmp_path)
    run = invoke("ingest", folder)
    assert_one_line_error(run, "failure headers written by the EventLogCallback",
                          "nothing was ingested")
    assert folder_state(tmp_path) == before


def test_ingest_into_storage_is_refused(invoke: Callable[..., Run], tmp_path: Path) -> None:
    folder = _ray_folder(tmp_path)
    before = folder_state(tmp_path)
    run = invoke("ingest", folder, "--db", "s3://bucket/exp/statemachine.db")
    assert_one_line_error(run, "cannot write to an event log on storage")
    assert folder_state(tmp_path) == before


def test_ingest_into_another_applications_database_is_refused(
    invoke: Callable[..., Run], tmp_path: Path
) -> None:
    folder = _ray_folder(tmp_path)
    other = tmp_path / "app.db"
    with closing(sqlite3.connect(other)) as conn, conn:
        conn.execute("CREATE TABLE users (id INTEGER)")
    before = folder_state(tmp_path)
    run = invoke("ingest", folder, "--db", other)
    assert_one_line_error(run, "is not a statemachine event log", "nothing was written")
    assert folder_state(tmp_path) == before
