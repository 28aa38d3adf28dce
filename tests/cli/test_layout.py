"""Tables fit the terminal (issue 13, item 4): at 80, 120 and 200 columns every table is
compared with its golden text, no line is wider than the terminal, no value is broken or cut,
and the columns a narrow terminal cannot hold are dropped by priority and named; ``--wide``
shows every column in full.

Relative times are counted from a pinned "now". After changing a layout on purpose,
regenerate the golden files and review the diff::

    UPDATE_GOLDEN=1 python -m pytest tests/cli/test_layout.py
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from statemachine.cli import output
from statemachine.cli.output import Column, fit_columns, relative_time
from tests.cli.conftest import EXP, FIXTURE, GOLDEN, Run

UPDATE = bool(os.environ.get("UPDATE_GOLDEN"))
LAYOUT = GOLDEN / "layout"
WIDTHS = (80, 120, 200)


def _fixture_times() -> tuple[str, datetime]:
    """The fixture's first event time (as stored) and its last one (regenerating the fixture
    with tests/data/make_fixture.py moves both; the golden files follow with UPDATE_GOLDEN)."""
    with sqlite3.connect(f"file:{FIXTURE}?mode=ro", uri=True) as db:
        first, last = db.execute("SELECT min(recorded_at), max(recorded_at) FROM events").fetchone()
    moment = datetime.fromisoformat(str(last))
    return str(first), moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


FIRST_EVENT, LAST_EVENT = _fixture_times()
#: Two hours after the fixture's last event, on the minute: what relative times count from.
NOW = LAST_EVENT.replace(second=0, microsecond=0) + timedelta(hours=2, minutes=1)

TABLES: dict[str, list[str]] = {
    "experiments": ["experiments"],
    "trials": ["trials", EXP],
    "show": ["show", EXP, "c_given_up"],
    "nodes": ["nodes", EXP],
    "what_if": ["what-if", EXP, "--max-failures", "0"],
}
#: Values that must appear whole (never folded or cut) wherever their column is shown.
WHOLE = ["a_recovered", "b_preempted_scratch", "c_given_up", "TERMINATED", "ERROR",
         "RESTART_FROM_SCRATCH", "RESTORING -> PENDING", "(FileNotFoundError)"]


@pytest.fixture(autouse=True)
def pinned_now(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(output, "now", lambda: NOW)


def _check(name: str, text: str) -> None:
    path = LAYOUT / f"{name}.txt"
    if UPDATE:
        LAYOUT.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.is_file(), f"no golden file {path}; run with UPDATE_GOLDEN=1 to write it"
    assert text == path.read_text(encoding="utf-8"), f"{name}: output differs from {path}"


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("table", sorted(TABLES))
def test_tables_fit_the_terminal(
    table: str, width: int, invoke: Callable[..., Run], fixture_db: Path
) -> None:
    run = invoke("--db", fixture_db, *TABLES[table], env={"COLUMNS": str(width)})
    assert run.exit_code == 0, run.stderr
    lines = [line.rstrip() for line in run.stdout.splitlines()]
    assert max(len(line) for line in lines) <= width
    assert "…" not in run.stdout  # nothing cut short
    for value in WHOLE:
        words = value.split()
        if any(words[0] in line for line in lines):  # its column is shown: the value whole
            assert any(value in line for line in lines), (value, run.stdout)
    _check(f"{table}_{width}", "\n".join(lines) + "\n")


def test_narrow_terminals_drop_columns_by_priority_and_say_so(
    invoke: Callable[..., Run], fixture_db: Path
) -> None:
    narrow = invoke("--db", fixture_db, "trials", EXP, env={"COLUMNS": "80"}).stdout
    wide = invoke("--db", fixture_db, "trials", EXP, env={"COLUMNS": "200"}).stdout
    header = next(line for line in narrow.splitlines() if line.startswith(" trial"))
    assert header.split() == ["trial", "status", "fails", "restore", "last", "error"]
    assert "checkpoint_000001" not in narrow and "checkpoint_000001" in wide
    assert "(not shown at this width: preempt, decision, checkpoint; --wide" in " ".join(
        narrow.split())
    assert "not shown" not in wide
    # What matters most stays: the trial, its status, its failures and the last error.
    assert "loss is NaN at step 120" in " ".join(narrow.split())


def test_wide_shows_every_column_in_full(invoke: Callable[..., Run], fixture_db: Path) -> None:
    run = invoke("--db", fixture_db, "trials", EXP, "--wide", env={"COLUMNS": "80"})
    assert run.exit_code == 0
    assert "restore fails (episode/total)" in run.stdout
    for row in json.loads(invoke("--db", fixture_db, "trials", EXP, "--json").stdout):
        line = next(x for x in run.stdout.splitlines() if f" {row['trial_id']} " in x)
        if row["latest_checkpoint"]:
            assert row["latest_checkpoint"] in line  # the whole path, not its basename
        if row["last_error_message"]:
            assert row["last_error_message"] in line  # on one line, never wrapped
    shown = invoke("--db", fixture_db, "experiments", "--wide", env={"COLUMNS": "80"}).stdout
    assert "1:crashed, 2:clean" in shown and FIRST_EVENT[:19].replace(" ", "T") in shown
    nodes = invoke("--db", fixture_db, "nodes", EXP, "--wide", env={"COLUMNS": "80"}).stdout
    assert "a7" * 28 in nodes  # the whole node id


def test_short_forms() -> None:
    NOW = datetime(2026, 11, 30, 22, 53, tzinfo=timezone.utc)
    assert relative_time("2026-11-30T22:52:15+00:00", reference=NOW) == "45s ago"
    assert relative_time("2026-11-30T20:52:58+00:00", reference=NOW) == "2h ago"
    assert relative_time("2026-11-25T20:52:58+00:00", reference=NOW) == "5d ago"
    assert relative_time("2025-01-01T00:00:00+00:00", reference=NOW) == "2025-01-01"
    assert relative_time("2027-01-01T00:00:00+00:00", reference=NOW) == "2027-01-01 00:00"
    assert relative_time(None) == ""
    assert output.basename("/mnt/ckpt/exp/trial/checkpoint_000003/") == "checkpoint_000003"
    assert output.basename("s3://bucket/checkpoint_1") == "checkpoint_1"


def test_fit_columns_never_squeezes_a_value_below_its_width() -> None:
    columns = [Column("id"), Column("message", 1, prose=True), Column("extra", 2)]
    rows = [["trial_00001", "a rather long message with words", "x" * 30]]
    kept, widths = fit_columns(columns, rows, 50)
    assert kept == [0, 1] and widths[0] == len("trial_00001")
    assert widths[1] >= len("message")  # the longest word (and at least a prose minimum)
    kept, widths = fit_columns(columns, rows, None)
    assert kept == [0, 1, 2] and widths == [11, 32, 30]


def test_a_long_table_prints_block_by_block_as_one_table(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A listing of 2,500 rows prints the same text in blocks of 1,000 (rich then holds one
    block's rendering, not the whole table's: issue 25's bounded memory) as in one table:
    one header, the same widths, nothing between the blocks."""
    columns = [Column("trial"), Column("status", status=True), Column("message", 1, prose=True)]
    rows = [[f"t_{i:05d}", ("ERROR", "TERMINATED")[i % 2], f"message {'x' * (i % 40)} done"]
            for i in range(2500)]
    printed: list[int] = []
    real_add_row = output.Table.add_row

    def counting_add_row(self: Any, *cells: Any, **kw: Any) -> None:
        printed.append(id(self))
        real_add_row(self, *cells, **kw)

    def render(block: int) -> str:
        monkeypatch.setattr(output, "TABLE_BLOCK_ROWS", block)
        out = output.Output(None)
        out.table(columns, rows, title="Trials")
        return capsys.readouterr().out

    monkeypatch.setenv("COLUMNS", "100")
    whole = render(10**9)
    printed.clear()
    monkeypatch.setattr(output.Table, "add_row", counting_add_row)
    blocks = render(1000)
    assert blocks == whole
    assert whole.count("trial") == 1 and whole.count("\n") >= 2500
    assert sorted(printed.count(t) for t in set(printed)) == [500, 1000, 1000]
