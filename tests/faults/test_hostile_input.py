"""Hostile and broken input: names that try to break out, rows broken behind the log's back,
and fuzzed decoders and command lines.

- Experiment and trial names with quotes, SQL, unicode, control characters and path
  separators round-trip exactly through the store and every ``trial-replay`` command (SQLite
  and PostgreSQL), and the log they are in verifies.
- A copy of a real log (``tests/data/fixture.db``, written by ``ExperimentLog``) is broken
  with raw ``sqlite3``: a corrupted JSON payload, an unknown event type, an event from a newer
  schema version, a gap in sequence numbers, another application's rows in the events table,
  and another application's database. Each is reported by ``verify`` (library and CLI, at the
  row's position) and by the reading commands, and nothing is written.
- ``decode_event``, ``StoredEvent.event`` and the CLI's arguments are fuzzed with hypothesis:
  nothing escapes but the project's own errors.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from statemachine.cli import cli
from statemachine.domain.events import EVENT_TYPES, decode_event, encode_event
from statemachine.exceptions import StateMachineError
from tests.cli.conftest import FIXTURE, folder_state
from tests.domain.domain_strategies import hostile_text
from tests.faults.faultkit import Figures, check_log, read_log, run_cli

pytestmark = [pytest.mark.faults]

EXP = "fixture_exp"

HOSTILE_NAMES = [
    "it's a \"quoted\" name",
    "x'; DROP TABLE events; --",
    "Robert'); DELETE FROM experiments WHERE ('1'='1",
    "ünïcødé 実験 🚀 ﷽",
    "../../etc/passwd",
    "a/b\\c/./d",
    "%_*?[]{}$HOME`id`",
    "tab\there, line\nbreak",
    "-rf --help",
    " leading and trailing ",
]


# ------------------------------------------------------------------ hostile names


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_url(request: pytest.FixtureRequest) -> str:
    """The same test on a SQLite file and on PostgreSQL (a schema of its own)."""
    return request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")


def record_trial(url: str, experiment: str, trial_id: str) -> int:
    """A trial's life with a failure and a restore retry; returns the events written."""
    from statemachine import (
        CheckpointSaved,
        RestoreError,
        RestoreSucceeded,
        RetryPolicy,
        TrainingError,
        TrialAdded,
        TrialCompleted,
        TrialFailed,
        TrialStarted,
    )
    from statemachine.log import ExperimentLog

    with ExperimentLog.open(url, experiment, RetryPolicy(max_failures=2)) as log:
        log.record(trial_id, TrialAdded(config={trial_id: experiment}))
        log.record(trial_id, TrialStarted())
        log.record(trial_id, CheckpointSaved(f"{experiment}/{trial_id}/checkpoint_0"))
        log.record(trial_id, TrialFailed(error=TrainingError(f"x.{trial_id}", experiment)))
        log.record(trial_id, TrialStarted())
        log.record(trial_id, TrialFailed(error=RestoreError("builtins.OSError", trial_id)))
        log.record(trial_id, TrialStarted())
        log.record(trial_id, RestoreSucceeded())
        log.record(trial_id, TrialCompleted())
        return len(log.store.read_trial(experiment, trial_id))


def test_hostile_names_round_trip(
    any_url: str, tmp_path: Path, reliability: Callable[[Figures], None]
) -> None:
    from collections import Counter

    from statemachine.log import EventStore

    pairs = list(zip(HOSTILE_NAMES, reversed(HOSTILE_NAMES), strict=True))
    written = {exp: record_trial(any_url, exp, trial) for exp, trial in pairs}

    with EventStore.open(any_url, create=False) as store:
        assert sorted(i.name for i in store.list_experiments()) == sorted(HOSTILE_NAMES)
        for exp, trial in pairs:
            assert store.list_trials(exp) == [trial]
            rows = store.read_trial(exp, trial)
            added = next(e for e in rows if e.type_name == "TrialAdded")
            assert added.event.config == {trial: exp}

    code, out, err = run_cli("--db", any_url, "experiments", "--json")
    assert code == 0, err
    assert sorted(e["name"] for e in json.loads(out)) == sorted(HOSTILE_NAMES)
    export_dir = tmp_path / "exports"
    export_dir.mkdir()
    copy_url = f"sqlite:///{tmp_path / 'copy.db'}"
    for n, (exp, trial) in enumerate(pairs):
        code, out, err = run_cli("--db", any_url, "trials", "--json", "--", exp)
        assert code == 0, (exp, err)
        assert [(r["trial_id"], r["status"], r["num_failures"]) for r in json.loads(out)] == [
            (trial, "TERMINATED", 2)]
        for command in ("show", "explain"):
            code, out, err = run_cli("--db", any_url, command, "--json", "--", exp, trial)
            assert code == 0, (command, exp, err)
            data = json.loads(out)
            assert (data["experiment"], data["trial_id"]) == (exp, trial)
        code, out, err = run_cli("--db", any_url, "verify", "--json", "--", exp)
        assert code == 0 and json.loads(out)["ok"], err
        exported = export_dir / f"{n}.jsonl"
        code, _, err = run_cli("--db", any_url, "export", "-o", exported, "--", exp)
        assert code == 0, err
        code, _, err = run_cli("--db", copy_url, "import", exported)
        assert code == 0, err
        code, again, _ = run_cli("--db", copy_url, "export", "--", exp)
        assert again == exported.read_text()

        def found(log: Any, exp: str = exp) -> dict[str, Counter[Any]]:
            return {"names": Counter((exp, r.trial_id) for r in log.rows)}

        check_log(
            any_url, exp, scenario=f"Hostile names ({any_url.split(':')[0]})",
            injected="experiment and trial names with quotes, SQL, unicode, control "
                     "characters and path separators, through the store and the CLI",
            times=len(pairs), expected={"names": Counter({(exp, trial): written[exp]})},
            found=found, reliability=None,
        )
    total = sum(written.values())
    reliability(Figures(
        scenario=f"Hostile names ({'PostgreSQL' if 'postgresql' in any_url else 'SQLite'})",
        injected="10 experiment/trial names: quotes, SQL, unicode, control characters, path "
                 "separators; store, every reading command, export/import",
        times=len(pairs), events_written=total, events_lost=0, duplicates=0, verify="ok",
    ))


# ------------------------------------------------------------------ broken rows


def _corrupt_json(conn: sqlite3.Connection) -> tuple[str, int]:
    conn.execute("UPDATE events SET payload = '{\"error\": [broken' "
                 "WHERE trial_id = 'c_given_up' AND seq = 9")
    return "c_given_up", 9


def _unknown_type(conn: sqlite3.Connection) -> tuple[str, int]:
    conn.execute("UPDATE events SET type_name = 'TrialTeleported' "
                 "WHERE trial_id = 'a_recovered' AND seq = 4")
    return "a_recovered", 4


def _newer_version(conn: sqlite3.Connection) -> tuple[str, int]:
    conn.execute("UPDATE events SET version = 99 WHERE trial_id = 'd_paused' AND seq = 3")
    return "d_paused", 3


def _seq_gap(conn: sqlite3.Connection) -> tuple[str, int]:
    # Append-only is the log's rule, not the file's: delete a row with raw SQL.
    conn.execute("DELETE FROM events WHERE trial_id = 'e_stopped' AND seq = 3")
    return "e_stopped", 4


def _foreign_rows(conn: sqlite3.Connection) -> tuple[str, int]:
    # Another application shares the database and writes its own rows into `events`.
    (exp_id,) = conn.execute("SELECT id FROM experiments WHERE name = ?", (EXP,)).fetchone()
    (last,) = conn.execute("SELECT max(seq) FROM events WHERE trial_id = 'f_aborted'").fetchone()
    conn.execute(
        "INSERT INTO events (experiment_id, trial_id, seq, type_name, version, payload, epoch, "
        "event_id, recorded_at) VALUES (?, 'f_aborted', ?, 'user.login', 1, "
        "'{\"user\": \"alice\", \"ip\": \"10.0.0.1\"}', 2, 'other-app-0001', "
        "'2026-11-29 12:00:00.000000')", (exp_id, last + 1))
    return "f_aborted", last + 1


def _corrupt_counters(conn: sqlite3.Connection) -> tuple[str, int]:
    conn.execute("UPDATE events SET counters = '[1, 2]' "
                 "WHERE trial_id = 'b_preempted_scratch' AND seq = 5")
    return "b_preempted_scratch", 5


BREAKAGES: dict[str, tuple[Callable[[sqlite3.Connection], tuple[str, int]], str, str]] = {
    # name: (break it, what verify's divergence field is, a fragment the reports name)
    "corrupted JSON payload": (_corrupt_json, "event", "not valid JSON"),
    "counters that are not a JSON object": (_corrupt_counters, "event", "not a JSON object"),
    "unknown event type": (_unknown_type, "event", "unknown event type 'TrialTeleported'"),
    "newer event schema version": (_newer_version, "event", "schema version 99"),
    "gap in sequence numbers": (_seq_gap, "gap", "seq 2 is followed by seq 4"),
    "another application's rows": (_foreign_rows, "event", "unknown event type 'user.login'"),
}


@pytest.fixture
def log_copy(tmp_path: Path) -> Path:
    """A private copy of a real log, in an experiment folder."""
    folder = tmp_path / EXP
    folder.mkdir()
    shutil.copyfile(FIXTURE, folder / "statemachine.db")
    return folder / "statemachine.db"


def position_of(db: Path, trial_id: str, seq: int) -> int:
    with closing(sqlite3.connect(db)) as conn:
        (position,) = conn.execute(
            "SELECT position FROM events WHERE trial_id = ? AND seq = ?", (trial_id, seq)
        ).fetchone()
    return int(position)


@pytest.mark.parametrize("breakage", list(BREAKAGES))
def test_broken_rows_are_reported_by_verify_and_the_cli(log_copy: Path, breakage: str) -> None:
    from statemachine.log import EventStore, verify

    rows_before = len(read_log(str(log_copy), EXP).rows)
    breaker, field, fragment = BREAKAGES[breakage]
    with closing(sqlite3.connect(log_copy)) as conn, conn:
        trial_id, seq = breaker(conn)
    position = position_of(log_copy, trial_id, seq)
    before = folder_state(log_copy.parent)

    with EventStore.open(log_copy, create=False) as store:
        result = verify(store, EXP)
    assert not result.ok
    if field == "gap":
        assert [(g.trial_id, g.after_seq, g.next_seq) for g in result.gaps] == [
            (trial_id, seq - 2, seq)]
    else:
        assert result.divergence is not None
        assert (result.divergence.position, result.divergence.trial_id, result.divergence.field
                ) == (position, trial_id, field)
        assert fragment in str(result.divergence.replayed)

    code, out, err = run_cli("--db", log_copy, "verify", EXP)
    assert code == 1 and "Traceback" not in err
    # Through the Machine itself: the same finding, in the same words.
    assert run_cli("--db", log_copy, "verify", EXP, "--machine") == (code, out, err)
    (line,) = err.strip().splitlines()
    assert line.startswith("trial-replay: verify failed: fixture_exp:")
    assert trial_id in line
    if field == "gap":
        assert fragment in out
    else:
        assert f"position {position}" in line and fragment in line

    # The reading commands report the row and show everything else.
    code, out, err = run_cli("--db", log_copy, "trials", EXP, "--json")
    assert "Traceback" not in err
    rows = {r["trial_id"]: r for r in json.loads(out)}
    assert len(rows) == 6
    if field != "gap" and "counters" not in breakage:  # trials folds payloads only
        assert code == 2
        (warning,) = err.strip().splitlines()
        assert warning.startswith("trial-replay: warning:")
        assert f"position {position}" in warning and trial_id in warning
    code, out, err = run_cli("--db", log_copy, "show", EXP, trial_id, "--json")
    assert "Traceback" not in err
    shown = json.loads(out)["events"]
    assert len(shown) == len(read_log(str(log_copy), EXP).of_trial(trial_id))
    if field == "gap":
        assert code == 0 and seq - 1 not in [e["seq"] for e in shown]
    else:
        assert code == 2
        (warning,) = err.strip().splitlines()
        assert warning.startswith("trial-replay: warning:")
        assert f"position {position}" in warning and trial_id in warning
    code, out, err = run_cli("--db", log_copy, "export", EXP)
    assert "Traceback" not in err and code in (0, 2)
    exported = [json.loads(line) for line in out.splitlines()]
    events = [e for e in exported if e["kind"] == "event"]
    assert len(events) == len(read_log(str(log_copy), EXP).rows)  # every row, none lost
    assert rows_before - 1 <= len(events) <= rows_before + 1
    # Reading never wrote anything.
    assert folder_state(log_copy.parent) == before


def test_broken_rows_figures(tmp_path: Path, reliability: Callable[[Figures], None]) -> None:
    """Each breakage on its own copy: every other row is still read, the broken one named."""
    from statemachine.log import EventStore, verify

    detected = 0
    for n, (breaker, field, _) in enumerate(BREAKAGES.values()):
        db = tmp_path / f"{n}.db"
        shutil.copyfile(FIXTURE, db)
        with closing(sqlite3.connect(db)) as conn, conn:
            breaker(conn)
        with EventStore.open(db, create=False) as store:
            result = verify(store, EXP)
        detected += (bool(result.gaps) if field == "gap" else
                     result.divergence is not None and result.divergence.field == field)
    assert detected == len(BREAKAGES)
    with EventStore.open(FIXTURE, create=False) as store:
        untouched = verify(store, EXP)
    assert untouched.ok
    reliability(Figures(
        scenario="Rows broken behind the log's back",
        injected="raw sqlite3 on a copy of a real log (one copy each): payload not JSON, "
                 "counters not an object, unknown type, newer version, seq gap, another "
                 "application's rows",
        times=len(BREAKAGES), events_written=untouched.events, events_lost=0, duplicates=0,
        verify=f"each breakage reported at its row ({detected}/{len(BREAKAGES)}); "
               "the untouched log: ok",
    ))


def another_applications_database(folder: Path) -> Path:
    """A database of another application: its own ``events`` table and Alembic stamp."""
    other = folder / "shop.db"
    with closing(sqlite3.connect(other)) as conn, conn:
        conn.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, kind TEXT, body TEXT)")
        conn.execute("INSERT INTO events (kind, body) VALUES ('order', '{\"sku\": 1}')")
        conn.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) PRIMARY KEY)")
        conn.execute("INSERT INTO alembic_version VALUES ('3f2a9c1b7d10')")
    return other


def test_another_applications_database_is_refused_and_left_alone(tmp_path: Path) -> None:
    """Every command refuses it in one line naming the file, and changes nothing."""
    other = another_applications_database(tmp_path)
    before = folder_state(tmp_path)
    for args in (["experiments"], ["verify"], ["trials", EXP]):
        code, _, err = run_cli("--db", other, *args)
        assert code == 2 and "Traceback" not in err
        (line,) = err.strip().splitlines()
        assert line.startswith("trial-replay: error:") and "shop.db" in line
    assert folder_state(tmp_path) == before


def test_another_applications_database_is_named_as_not_an_event_log(tmp_path: Path) -> None:
    from statemachine.exceptions import NotAnEventLogError
    from statemachine.log import EventStore

    other = another_applications_database(tmp_path)
    before = folder_state(tmp_path)
    code, _, err = run_cli("--db", other, "experiments")
    assert code == 2 and "not a statemachine event log" in err and "upgrade" not in err
    assert "another application's schema (Alembic revision '3f2a9c1b7d10')" in err
    assert folder_state(tmp_path) == before
    with pytest.raises(NotAnEventLogError):  # a driver pointed at it: refused, not migrated
        EventStore.open(other).close()
    with closing(sqlite3.connect(other)) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert tables == {"events", "alembic_version"}
        assert conn.execute("SELECT kind, body FROM events").fetchall() == [
            ("order", '{"sku": 1}')]
        assert conn.execute("SELECT * FROM alembic_version").fetchall() == [("3f2a9c1b7d10",)]


def test_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    notes = tmp_path / "notes.db"
    notes.write_text("these are my notes, not a database\n" * 100)
    before = folder_state(tmp_path)
    code, _, err = run_cli("--db", notes, "verify")
    assert code == 2 and "Traceback" not in err
    (line,) = err.strip().splitlines()
    assert "notes.db is not a statemachine event log" in line
    assert folder_state(tmp_path) == before


# ------------------------------------------------------------------ fuzzing

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | hostile_text(40),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(hostile_text(12), children, max_size=4),
    max_leaves=12,
)


def valid_payloads() -> st.SearchStrategy[tuple[str, int, dict[str, Any]]]:
    """Stored forms of real events (from the domain's own strategies)."""
    from tests.domain.domain_strategies import any_event

    return any_event.map(encode_event)


def assert_decodes_or_refuses(type_name: Any, version: Any, payload: Any) -> None:
    try:
        event = decode_event(type_name, version, payload)
    except StateMachineError as exc:
        assert str(exc)
        return
    again = decode_event(*encode_event(event))
    assert again == event


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    type_name=st.sampled_from(sorted(EVENT_TYPES)) | hostile_text(20),
    version=st.integers(-3, 4) | st.sampled_from([None, "1", 1.0, True]),
    payload=JSON,
)
def test_fuzz_decode_event_random(type_name: Any, version: Any, payload: Any) -> None:
    assert_decodes_or_refuses(type_name, version, payload)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fuzz_decode_event_mutated(data: st.DataObject) -> None:
    """A real event's payload with one field removed, replaced or added."""
    type_name, version, payload = data.draw(valid_payloads())
    payload = dict(payload)
    keys = sorted(payload)
    action = data.draw(st.sampled_from(["drop", "replace", "add"] if keys else ["add"]))
    if action == "drop":
        payload.pop(data.draw(st.sampled_from(keys)))
    elif action == "replace":
        payload[data.draw(st.sampled_from(keys))] = data.draw(JSON)
    else:
        payload[data.draw(hostile_text(8))] = data.draw(JSON)
    assert_decodes_or_refuses(type_name, version, payload)


@settings(max_examples=1000, deadline=None)
@given(text=hostile_text(60) | JSON.map(json.dumps))
def test_fuzz_stored_payload_text(text: str) -> None:
    """Whatever text sits in the payload column, reading the row raises only our error."""
    from datetime import datetime, timezone

    from statemachine.log.records import StoredEvent

    for type_name in ("TrialFailed", "TrialAdded", "CheckpointSaved"):
        row = StoredEvent(1, EXP, "t", 1, type_name, 1, text, None, None, None, None, text,
                          1, "id", datetime.now(timezone.utc))
        try:
            event = row.event
        except StateMachineError as exc:
            assert "position 1" in str(exc), exc
        else:
            assert decode_event(*encode_event(event)) == event
        try:
            counters = row.counters
        except StateMachineError as exc:
            assert "position 1" in str(exc), exc
        else:
            assert counters is None or isinstance(counters, dict)


COMMANDS = ["experiments", "trials", "show", "explain", "what-if", "verify", "export", "nodes",
            "timeline", "diagram", "tail", "import", "ingest"]
OPTIONS = ["--json", "--at", "--status", "--max-failures", "--restore-retry-num",
           "--on-restore-exhausted", "--count-preemption-as-failure",
           "--no-count-preemption-as-failure", "--avoid-failed-nodes", "--trial", "-n",
           "--interval", "-o", "--as", "--name", "--help", "--version", "--"]
VALUES = [EXP, "other_exp", "c_given_up", "a_recovered", "0", "-1", "3", "999999999999",
          "2026-11-29T12:00:00Z", "yesterday", "RUNNING", "ERROR", "retry_checkpoint",
          "out.dot", "out.svg", "out.html", "bad.pdf", "no/such/dir/x.svg", "missing.jsonl"]


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("cli-fuzz")
    shutil.copyfile(FIXTURE, folder / "statemachine.db")
    yield folder


@settings(max_examples=1500, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(argv=st.lists(
    st.sampled_from(COMMANDS) | st.sampled_from(OPTIONS) | st.sampled_from(VALUES)
    | st.text(max_size=12), max_size=7))
@example(argv=["export", EXP])  # prints the tracebacks the log holds: data, not a crash
@example(argv=["ingest", "."])  # the log's own folder: not a Ray experiment, nothing written
def test_fuzz_cli_arguments(argv: list[str], fuzz_dir: Path,
                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Any command line exits 0, 1 or 2 with no traceback; the log is never changed."""
    monkeypatch.chdir(fuzz_dir)
    monkeypatch.delenv("STATEMACHINE_DB_URL", raising=False)
    db = fuzz_dir / "statemachine.db"
    size = db.stat().st_size
    result = CliRunner().invoke(cli, ["--db", str(fuzz_dir), *argv], catch_exceptions=False)
    assert result.exit_code in (0, 1, 2), (argv, result.exit_code, result.output)
    # A crash's traceback goes to stderr; stdout may show the tracebacks the log records.
    assert "Traceback" not in result.stderr
    if result.exit_code == 2 and result.stderr.strip():
        assert result.stderr.lstrip().startswith(("trial-replay:", "Usage:")), result.stderr
    assert db.stat().st_size == size
