"""Hostile files: imports that lie, logs that must not be touched, rows that disagree.

- ``import`` of a file that breaks the export schema (``docs/cli.md``), or whose replay
  diverges, writes nothing (exit 2 or 1, one line); a target store that did not exist is not
  created; another application's database is refused and left byte-identical; the import is
  one transaction; the snapshots are rebuilt (issue 16, item 4; issue 13, item 10).
- Read commands change no file: a crashed driver's leftover WAL is read, not checkpointed; a
  ``chmod 444`` log and a log in a read-only folder are read and left as they were (item 5).
- ``verify`` finds a snapshot ahead of its events, an ``error_type`` column that disagrees
  with the payload, an event epoch no session has, and time going back (item 7).
- A NUL in a logged checkpoint path is refused like other unsafe paths (item 9).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statemachine.cli import cli
from tests.cli.conftest import copy_fixture, folder_state
from tests.domain.domain_strategies import hostile_text, text
from tests.faults.faultkit import Figures

pytestmark = [pytest.mark.faults]

EXP = "fixture_exp"


def run_cli(*args: str | Path) -> tuple[int, str, str]:
    """``trial-replay ARGS`` in-process: (exit code, stdout, stderr)."""
    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def exported(tmp_path: Path) -> list[dict[str, Any]]:
    """The fixture experiment's export, one dict per line."""
    code, out, err = run_cli("--db", copy_fixture(tmp_path / "source.db"), "export", EXP)
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()]


def write_lines(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def first(records: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(r for r in records if r["kind"] == kind)


def _drop(field: str, kind: str) -> Callable[[list[dict[str, Any]]], None]:
    return lambda records: first(records, kind).pop(field)


def _set(field: str, kind: str, value: Any) -> Callable[[list[dict[str, Any]]], None]:
    return lambda records: first(records, kind).__setitem__(field, value)


#: Each a file the old import took with a traceback, or "OK" into a store it then broke.
INVALID = {
    "session without host": (_drop("host", "session"), "'host'"),
    "pid 'abc'": (_set("pid", "session", "abc"), "pid must be integer"),
    "header epoch 'two'": (_set("epoch", "experiment", "two"), "epoch must be integer"),
    "header epoch 0": (_set("epoch", "experiment", 0), "epoch must be between 1"),
    "event without event_id": (_drop("event_id", "event"), "'event_id'"),
    "version 2**70": (_set("version", "event", 2**70), "version must be between 1"),
    "policy max_failures 'x'": (_set("policy", "session", {"max_failures": "x"}),
                                "not a retry policy: max_failures must be an integer"),
    "recorded_at not a time": (_set("recorded_at", "event", "yesterday"), "not an ISO time"),
    "trial id with NUL": (_set("trial_id", "event", "t\x00"), "NUL"),
    "unknown field": (_set("colour", "event", "red"), "unknown field 'colour'"),
    "status not a status": (_set("status_after", "event", "DONE"), "status_after must be one"),
}


@pytest.mark.parametrize("case", list(INVALID))
def test_import_of_an_invalid_file_writes_nothing(
    case: str, exported: list[dict[str, Any]], tmp_path: Path
) -> None:
    """Exit 2 with one line naming the line and field; no new store, an old one untouched."""
    breaker, fragment = INVALID[case]
    breaker(exported)
    bad = write_lines(tmp_path / "bad.jsonl", exported)
    new = tmp_path / "new" / "log.db"
    new.parent.mkdir()
    code, _, err = run_cli("--db", new, "import", bad)
    assert code == 2 and fragment in err and "line " in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert list(new.parent.iterdir()) == []  # the target was never created


def test_import_into_an_existing_log_is_all_or_nothing(
    exported: list[dict[str, Any]], tmp_path: Path
) -> None:
    """A failure in the middle of the write (a repeated event id the schema cannot see)
    rolls the whole import back: the store's file is byte-identical afterwards."""
    target = tmp_path / "kept"
    target.mkdir()
    copy_fixture(target / "log.db")
    events = [r for r in exported if r["kind"] == "event"]
    events[-1]["event_id"] = events[0]["event_id"]  # caught only by the UNIQUE constraint
    bad = write_lines(tmp_path / "dup.jsonl", exported)
    before = folder_state(target)
    code, _, err = run_cli("--db", target / "log.db", "import", "--as", "copy", bad)
    assert code == 2 and "UNIQUE" in err and "Traceback" not in err, err
    assert folder_state(target) == before
    # The same failure into a new store leaves no file behind.
    code, _, err = run_cli("--db", tmp_path / "fresh.db", "import", bad)
    assert code == 2 and not (tmp_path / "fresh.db").exists(), err
    assert not list(tmp_path.glob("fresh.db*"))


@pytest.mark.postgres
def test_import_into_postgresql_is_all_or_nothing(
    exported: list[dict[str, Any]], tmp_path: Path, pg_url: str
) -> None:
    """The same rollback on PostgreSQL: a store holding one experiment keeps exactly it."""
    good = write_lines(tmp_path / "good.jsonl", exported)
    code, _, err = run_cli("--db", pg_url, "import", good)
    assert code == 0, err
    events = [r for r in exported if r["kind"] == "event"]
    events[-1]["event_id"] = events[0]["event_id"]
    code, _, err = run_cli("--db", pg_url, "import", "--as", "copy",
                           write_lines(tmp_path / "dup.jsonl", exported))
    assert code == 2 and "Traceback" not in err, err
    code, out, _ = run_cli("--db", pg_url, "experiments", "--json")
    assert [e["name"] for e in json.loads(out)] == [EXP]
    code, out, _ = run_cli("--db", pg_url, "verify", "--json", EXP)
    assert code == 0 and json.loads(out)["experiments"][0]["events"] == len(events)


def test_import_of_a_diverging_file_is_refused_unless_forced(
    exported: list[dict[str, Any]], tmp_path: Path
) -> None:
    """A recorded decision the fold does not give: exit 1, nothing written; --force imports."""
    event = next(r for r in exported if r["kind"] == "event" and r["decision"] == "RECOVER")
    event["decision"] = "RETRY_RESTORE"
    bad = write_lines(tmp_path / "lie.jsonl", exported)
    target = tmp_path / "t.db"
    code, _, err = run_cli("--db", target, "import", bad)
    assert code == 1 and "decision recorded 'RETRY_RESTORE'" in err and "--force" in err, err
    assert not target.exists()
    code, out, err = run_cli("--db", target, "import", "--force", "--json", bad)
    assert code == 0 and json.loads(out)["verified"] is False and "decision" in err
    code, out, _ = run_cli("--db", target, "verify", "--json", EXP)
    assert code == 1 and json.loads(out)["experiments"][0]["divergence"]["field"] == "decision"


def another_applications_database(folder: Path) -> Path:
    """Another application's SQLite database, never stamped by Alembic."""
    other = folder / "shop.db"
    with closing(sqlite3.connect(other)) as conn, conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, sku TEXT)")
        conn.execute("INSERT INTO orders (sku) VALUES ('a-1')")
    return other


def test_import_into_another_applications_database_is_refused(
    exported: list[dict[str, Any]], tmp_path: Path
) -> None:
    good = write_lines(tmp_path / "good.jsonl", exported)
    shop = tmp_path / "shop"
    shop.mkdir()
    other = another_applications_database(shop)
    before = folder_state(shop)
    code, _, err = run_cli("--db", other, "import", good)
    assert code == 2 and "not a statemachine event log" in err and "orders" in err, err
    assert folder_state(shop) == before  # byte-identical, no -wal/-shm/-journal


def test_import_streams_and_restores_the_snapshots(tmp_path: Path) -> None:
    """``verify`` after an import checks as many snapshots as the source's (issue 13)."""
    source = copy_fixture(tmp_path / "source.db")
    code, out, _ = run_cli("--db", source, "verify", "--json", EXP)
    assert code == 0
    source_checked = json.loads(out)["experiments"][0]["snapshots_checked"]
    assert source_checked > 0
    code, _, err = run_cli("--db", source, "export", "-o", tmp_path / "e.jsonl", EXP)
    assert code == 0, err
    code, out, err = run_cli("--db", tmp_path / "copy.db", "import", "--json", tmp_path / "e.jsonl")
    assert code == 0, err
    assert json.loads(out)["snapshots"] >= source_checked
    code, out, _ = run_cli("--db", tmp_path / "copy.db", "verify", "--json", EXP)
    assert code == 0 and json.loads(out)["experiments"][0]["snapshots_checked"] >= source_checked


def test_import_figures(
    exported: list[dict[str, Any]], tmp_path: Path, reliability: Callable[[Figures], None]
) -> None:
    """Every invalid file of :data:`INVALID` into an existing log: nothing changes."""
    target = tmp_path / "kept"
    target.mkdir()
    copy_fixture(target / "log.db")
    before = folder_state(target)
    refused = 0
    for n, (breaker, _) in enumerate(INVALID.values()):
        records = json.loads(json.dumps(exported))
        breaker(records)
        code, _, _ = run_cli("--db", target / "log.db", "import", "--as", "copy",
                             write_lines(tmp_path / f"{n}.jsonl", records))
        refused += code == 2
    assert refused == len(INVALID) and folder_state(target) == before
    events = sum(r["kind"] == "event" for r in exported)
    reliability(Figures(
        scenario="Hostile export files",
        injected=f"{len(INVALID)} invalid exports (a field missing, mistyped, out of range, "
                 "an unusable policy, a NUL) into an existing log; a diverging replay; a "
                 "repeated event id found only by the database; another application's database",
        times=len(INVALID) + 3, events_written=events, events_lost=0, duplicates=0,
        verify=f"each refused before writing ({refused}/{len(INVALID)}); the log "
               "byte-identical",
    ))


# ------------------------------------------------------------------ read-only reading


READ_COMMANDS = [("experiments",), ("trials", EXP), ("verify", EXP),
                 ("show", EXP, "a_recovered"), ("export", EXP)]


def crashed_driver_log(folder: Path) -> tuple[Path, int]:
    """A log whose driver died with events only in the WAL; returns it and its event count."""
    from statemachine import RetryPolicy, TrialAdded, TrialStarted
    from statemachine.log import ExperimentLog

    live = folder / "live"
    live.mkdir()
    db = live / "statemachine.db"
    copy_fixture(db)
    log = ExperimentLog.open(db, EXP, RetryPolicy())
    log.record("crash_trial", TrialAdded(config={}))
    log.record("crash_trial", TrialStarted())
    events = len(list(log.store.read_experiment(EXP)))
    crashed = folder / "crashed"
    crashed.mkdir()
    for suffix in ("", "-wal", "-shm"):  # what a SIGKILL leaves: the files as they are now
        shutil.copyfile(live / f"statemachine.db{suffix}", crashed / f"statemachine.db{suffix}")
    log.close()
    assert (crashed / "statemachine.db-wal").stat().st_size > 0
    return crashed / "statemachine.db", events


def test_a_crashed_drivers_wal_is_read_and_not_checkpointed(tmp_path: Path) -> None:
    db, events = crashed_driver_log(tmp_path)
    folder = db.parent
    before = folder_state(folder)
    for command in READ_COMMANDS:
        code, out, err = run_cli("--db", db, *command, "--json")
        assert code == 0, (command, err)
    code, out, _ = run_cli("--db", db, "verify", "--json", EXP)
    assert json.loads(out)["experiments"][0]["events"] == events  # the WAL's events included
    after = folder_state(folder)
    assert sorted(after) == sorted(before)  # no file added or removed
    for name in ("statemachine.db", "statemachine.db-wal"):  # -shm is SQLite's index
        assert after[name] == before[name], name


def test_a_read_only_file_is_read_and_left_alone(tmp_path: Path) -> None:
    folder = tmp_path / "ro-file"
    folder.mkdir()
    db = copy_fixture(folder / "statemachine.db")
    db.chmod(0o444)
    before = folder_state(folder)
    for command in READ_COMMANDS:
        code, _, err = run_cli("--db", db, *command, "--json")
        assert code == 0, (command, err)
    assert folder_state(folder) == before  # byte-identical, no -wal/-shm beside it


@contextmanager
def read_only_folder(source: Path, tmp_path: Path) -> Iterator[Path]:
    """``source`` bind-mounted read-only (skipped when mounting is not permitted)."""
    target = tmp_path / "ro-mount"
    target.mkdir()
    done = subprocess.run(
        f"mount --bind {source} {target} && mount -o remount,bind,ro {target}",
        shell=True, capture_output=True, text=True, check=False,
    )
    if done.returncode != 0:
        subprocess.run(["umount", str(target)], capture_output=True, check=False)
        pytest.skip(f"cannot bind-mount a read-only folder: {done.stderr.strip()}")
    try:
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], capture_output=True, check=False)


def test_a_log_in_a_read_only_folder_is_read(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    copy_fixture(source / "statemachine.db")
    _, events = crashed_driver_log(source)
    before = folder_state(source)
    with read_only_folder(source, tmp_path) as ro:
        assert not os.access(ro, os.W_OK)
        for command in READ_COMMANDS:
            code, _, err = run_cli("--db", ro / "statemachine.db", *command, "--json")
            assert code == 0, (command, err)
        code, out, err = run_cli("--db", ro / "crashed" / "statemachine.db", "verify",
                                 "--json", EXP)
        assert code == 0 and json.loads(out)["experiments"][0]["events"] == events, err
    assert folder_state(source) == before


# ------------------------------------------------------------------ verify's new checks


def _snapshot_ahead(conn: sqlite3.Connection) -> None:
    conn.execute("UPDATE snapshots SET seq = seq + 5, state = json_set(state, '$.seq', "
                 "json_extract(state, '$.seq') + 5) WHERE trial_id = 'a_recovered'")


def _error_type(conn: sqlite3.Connection) -> None:
    conn.execute("UPDATE events SET error_type = 'RestoreError' WHERE position = "
                 "(SELECT min(position) FROM events WHERE error_type = 'TrainingError')")


def _epoch(conn: sqlite3.Connection) -> None:
    conn.execute("UPDATE events SET epoch = 7 WHERE position = 5")


def _time_back(conn: sqlite3.Connection) -> None:
    conn.execute("UPDATE events SET recorded_at = '2001-01-01 00:00:00.000000' "
                 "WHERE position = 6")


#: breakage -> (how, the divergence field verify names)
INCONSISTENT = {
    "snapshot ahead of its events": (_snapshot_ahead, "snapshot"),
    "error_type column vs payload": (_error_type, "error_type"),
    "epoch of no session": (_epoch, "epoch"),
    "time going back": (_time_back, "recorded_at"),
}


@pytest.mark.parametrize("case", list(INCONSISTENT))
def test_verify_finds_rows_that_disagree(case: str, tmp_path: Path) -> None:
    breaker, field = INCONSISTENT[case]
    db = copy_fixture(tmp_path / "log.db")
    with closing(sqlite3.connect(db)) as conn, conn:
        breaker(conn)
    code, out, err = run_cli("--db", db, "verify", "--json", EXP)
    assert code == 1, err
    divergence = json.loads(out)["experiments"][0]["divergence"]
    assert divergence["field"] == field, divergence


def test_verify_figures(tmp_path: Path, reliability: Callable[[Figures], None]) -> None:
    found = 0
    for n, (breaker, field) in enumerate(INCONSISTENT.values()):
        db = copy_fixture(tmp_path / f"{n}.db")
        with closing(sqlite3.connect(db)) as conn, conn:
            breaker(conn)
        code, out, _ = run_cli("--db", db, "verify", "--json", EXP)
        found += code == 1 and json.loads(out)["experiments"][0]["divergence"]["field"] == field
    code, out, _ = run_cli("--db", copy_fixture(tmp_path / "clean.db"), "verify", "--json", EXP)
    clean = json.loads(out)["experiments"][0]
    assert found == len(INCONSISTENT) and code == 0
    reliability(Figures(
        scenario="Rows that disagree with each other",
        injected="raw sqlite3 on a copy of a real log (one copy each): a snapshot ahead of "
                 "its events, an error_type column unlike the payload, an epoch no session "
                 "has, a time going back within a session",
        times=len(INCONSISTENT), events_written=clean["events"], events_lost=0, duplicates=0,
        verify=f"each found with its field ({found}/{len(INCONSISTENT)}); the untouched log: ok",
    ))


def test_read_only_figures(tmp_path: Path, reliability: Callable[[Figures], None]) -> None:
    db, events = crashed_driver_log(tmp_path)
    before = folder_state(db.parent)
    for command in READ_COMMANDS:
        assert run_cli("--db", db, *command, "--json")[0] == 0
    after = folder_state(db.parent)
    changed = sorted(k for k in after if after.get(k) != before.get(k))
    assert changed in ([], ["statemachine.db-shm"])
    reliability(Figures(
        scenario="Reading a log that must not change",
        injected="a SIGKILLed driver's leftover WAL, a chmod 444 file, a read-only folder; "
                 f"{len(READ_COMMANDS)} read commands on each",
        times=3, events_written=events, events_lost=0, duplicates=0,
        verify="every committed event read (the WAL's too); database and WAL byte-identical, "
               "no file added",
    ))


# ------------------------------------------------------------------ fuzz: the exact round trip


def _storable(text: str) -> bool:
    from statemachine.exceptions import StateMachineError
    from statemachine.log.records import check_storable

    try:
        check_storable(text, "name")
    except StateMachineError:
        return False
    return True


@st.composite
def lives(draw: st.DrawFn) -> tuple[str, list[tuple[str, list[Any]]]]:
    """An experiment name and, per trial, a valid life built from arbitrary text."""
    from statemachine import (
        CheckpointSaved,
        TrainingError,
        TrialAdded,
        TrialFailed,
        TrialStarted,
        TrialStopped,
    )

    name = draw(hostile_text(min_size=1, max_size=30).filter(_storable))
    trial_ids = draw(st.lists(hostile_text(min_size=1, max_size=30).filter(_storable),
                              min_size=1, max_size=3, unique=True))
    big = draw(st.sampled_from(["", "x" * 1_000_000]))  # now and then a 1 MB string
    trials = []
    for trial in trial_ids:
        config = draw(st.dictionaries(text, text | st.integers() | st.lists(text), max_size=3))
        events: list[Any] = [TrialAdded(config={**config, "big": big}), TrialStarted()]
        for _ in range(draw(st.integers(0, 2))):
            events.append(CheckpointSaved(draw(text)))
        if draw(st.booleans()):
            error = TrainingError(draw(text), draw(text), draw(text))  # retried: a restart
            events += [TrialFailed(error=error), TrialStarted()]
        events.append(TrialStopped(reason=draw(text)))
        trials.append((trial, events))
    return name, trials


def _everything(url: str, experiment: str) -> dict[str, Any]:
    from statemachine.log import EventStore

    with EventStore.open(url, create=False) as store:
        rows = [(r.trial_id, r.seq, r.type_name, r.version, r.payload_json, r.error_type,
                 r.status_before, r.status_after, r.decision, r.counters_json, r.epoch,
                 r.event_id, r.recorded_at) for r in store.read_experiment(experiment)]
        sessions = [(s.epoch, s.host, s.pid, s.policy, s.started_at, s.ended_at, s.clean_end)
                    for s in store.list_sessions(experiment)]
        snapshots = {t: s.to_dict() for t, s in store.load_snapshots(experiment).items()}
    return {"rows": rows, "sessions": sessions, "snapshots": snapshots}


@given(life=lives())
@settings(max_examples=int(os.environ.get("STATEMACHINE_FUZZ_EXAMPLES", "15")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
def test_fuzz_record_export_import_round_trip(
    life: tuple[str, list[tuple[str, list[Any]]]], tmp_path: Path
) -> None:
    """Record arbitrary text, export, import into a fresh store: the same rows, sessions and
    snapshots, the same export again, and no traceback."""
    import tempfile

    from statemachine import RetryPolicy
    from statemachine.log import ExperimentLog

    name, trials = life
    with tempfile.TemporaryDirectory(dir=tmp_path) as folder:
        source, copy = Path(folder) / "source.db", Path(folder) / "copy.db"
        with ExperimentLog.open(source, name, RetryPolicy(max_failures=3)) as log:
            for trial, events in trials:
                for event in events:
                    log.record(trial, event)
        first = Path(folder) / "first.jsonl"
        code, _, err = run_cli("--db", source, "export", "-o", first, "--", name)
        assert code == 0, err
        code, out, err = run_cli("--db", copy, "import", "--json", first)
        assert code == 0 and json.loads(out)["verified"], err
        assert _everything(str(copy), name) == _everything(str(source), name)
        code, again, err = run_cli("--db", copy, "export", "--", name)
        assert code == 0 and again == first.read_text(encoding="utf-8"), err
