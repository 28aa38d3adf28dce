"""Hostile text on the way out: what the log holds is shown literally and safely.

One test per class of issue 16 (items 2, 3, 6 and 8), each through the real store and the
real ``trial-replay`` command line:

- **markup**: ``could not open [/mnt/ckpt]``, ``[link=...]``, ``[rank0]`` and ``[bold]`` in
  stored text print as they are (no ``MarkupError``, no terminal hyperlink, nothing vanishes);
- **terminal escapes**: ``\\x1b]0;...\\x07``, ``\\x1b[2J``, C1 controls, bidi overrides and lone
  surrogates in a trial id or a message are shown visibly escaped by every human output, kept
  exactly (JSON-escaped) by ``--json``; the SVG/HTML timeline stays a valid file and the PNG
  one does not read ``$`` as mathtext;
- **one corrupted column** (``recorded_at = 'garbage'``, a payload that is not JSON): verify
  names the row's position and field, the other commands keep working;
- **absurd option values**: every numeric option of every command, given NaN, infinity or a
  number past any range, is exit 2 with one line;
- a hypothesis fuzz writes events made of arbitrary text and runs every read command.
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import click
import pytest
from hypothesis import HealthCheck, given, settings

from statemachine.cli import cli
from tests.cli.conftest import FIXTURE
from tests.domain.domain_strategies import hostile_text
from tests.faults.faultkit import Figures, read_log, run_cli

pytestmark = [pytest.mark.faults]

#: What must never reach a terminal raw: every control character but the newline that ends a
#: line, DEL, C1, lone surrogates, line/paragraph separators and the bidi controls.
RAW = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\ud800-\udfff\u2028\u2029\u061c\u200e\u200f"
    "\u202a-\u202e\u2066-\u2069]"
)

EXP = "hostile"
TRIAL = "t\x1b]0;pwned\x07\x1b[2J[rank0][link=https://evil.example]x[/link]$x^2$\x9b\u202e"
MESSAGE = ("could not open [/mnt/ckpt] [bold]loud[/bold] [rank0] "
           "[link=https://evil.example]click[/link] \x1b]8;;https://evil.example\x07here"
           "\x1b]8;;\x07 \x1b[2J\x1b[31mred\x07 \x9b31m shard-\udcff.bin \u202eevil")
CHECKPOINT = "/mnt/ckpt/[rank0]/\x1b[2J/\udcff/checkpoint_000001"


def record_hostile(url: str, experiment: str, trial_id: str, message: str,
                   checkpoint: str) -> int:
    """A trial's life (two failures, a restore retry, a node) holding hostile text in every
    field that takes text; returns the events written."""
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
    from statemachine.domain.nodes import NodeRef
    from statemachine.log import ExperimentLog

    node = NodeRef(node_id="a" * 56, node_ip="10.0.0.7", hostname=message[:40])
    with ExperimentLog.open(url, experiment, RetryPolicy(max_failures=2)) as log:
        log.record(trial_id, TrialAdded(config={message: [checkpoint]}))
        log.record(trial_id, TrialStarted(node=node))
        log.record(trial_id, CheckpointSaved(checkpoint))
        log.record(trial_id, TrialFailed(error=TrainingError(f"x.{message[:20]}", message,
                                                             message), node=node))
        log.record(trial_id, TrialStarted(restore_from=checkpoint, node=node))
        log.record(trial_id, TrialFailed(error=RestoreError("builtins.OSError", message),
                                         node=node))
        log.record(trial_id, TrialStarted(restore_from=checkpoint))
        log.record(trial_id, RestoreSucceeded())
        log.record(trial_id, TrialCompleted())
        return len(log.store.read_trial(experiment, trial_id))


def read_commands(experiment: str, trial_id: str, folder: Path) -> list[list[str]]:
    """Every read command of ``trial-replay`` (human form), on one experiment and trial."""
    return [
        ["experiments"],
        ["trials", "--", experiment],
        ["trials", "--wide", "--", experiment],
        ["show", "--", experiment, trial_id],
        ["show", "--wide", "--", experiment, trial_id],
        ["explain", "--", experiment, trial_id],
        ["nodes", "--", experiment],
        ["what-if", "--max-failures", "0", "--", experiment],
        ["verify", "--", experiment],
        ["tail", "-n", "100", "--", experiment],
        ["timeline", "-o", str(folder / "t.svg"), "--", experiment],
        ["timeline", "-o", str(folder / "t.html"), "--", experiment],
    ]


def assert_safe(code: int, out: str, err: str, what: Any) -> None:
    assert code == 0, (what, code, err)
    assert "Traceback" not in out + err, what
    raw = RAW.search(out + err)
    assert raw is None, (what, repr(raw.group()) if raw else None)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_url(request: pytest.FixtureRequest) -> str:
    """The same test on a SQLite file and on PostgreSQL (a schema of its own)."""
    return request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")


# ------------------------------------------------------------------ markup and escapes


def test_markup_and_terminal_escapes_are_shown_literally(
    any_url: str, tmp_path: Path, reliability: Callable[[Figures], None]
) -> None:
    from statemachine.cli.safe_text import visible

    written = record_hostile(any_url, EXP, TRIAL, MESSAGE, CHECKPOINT)
    commands = read_commands(EXP, TRIAL, tmp_path)
    for args in commands:
        for width in ("80", "200"):
            assert_safe(*run_cli("--db", any_url, *args, env={"COLUMNS": width}), args)
    # Literally: markup is text, escapes are visible; nothing vanished.
    _, wide, _ = run_cli("--db", any_url, "trials", "--wide", "--", EXP)
    assert visible(MESSAGE) in wide
    for literal in ("could not open [/mnt/ckpt]", "[bold]loud[/bold]", "[rank0]",
                    "[link=https://evil.example]click[/link]", "\\x1b[2J", "\\x9b31m",
                    "\\udcff", "\\u202eevil", "\\x1b]8;;https://evil.example\\x07here"):
        assert literal in wide, literal
    assert visible(TRIAL) in wide and visible(CHECKPOINT) in wide
    _, shown, _ = run_cli("--db", any_url, "explain", "--", EXP, TRIAL)
    assert "could not open [/mnt/ckpt]" in shown and "\\x1b[2J" in shown
    _, tail, _ = run_cli("--db", any_url, "tail", "--", EXP)
    assert visible(TRIAL) in tail
    # An error naming a stored name escapes it too.
    code, _, err = run_cli("--db", any_url, "show", "--", EXP, TRIAL + "zz")
    assert code == 2 and RAW.search(err) is None and "\\x1b[2J" in err

    # JSON: the exact text, JSON-escaped (no raw control character either).
    for args in (["trials", "--json", "--", EXP], ["show", "--json", "--", EXP, TRIAL],
                 ["explain", "--json", "--", EXP, TRIAL], ["tail", "--json", "--", EXP],
                 ["experiments", "--json"], ["nodes", "--json", "--", EXP],
                 ["what-if", "--max-failures", "0", "--json", "--", EXP],
                 ["verify", "--json", "--", EXP]):
        code, out, err = run_cli("--db", any_url, *args)
        assert_safe(code, out, err, args)
        for line in out.splitlines() if args[0] == "tail" else [out]:
            json.loads(line)
    (row,) = json.loads(run_cli("--db", any_url, "trials", "--json", "--", EXP)[1])
    assert (row["trial_id"], row["last_error_message"], row["latest_checkpoint"]) == (
        TRIAL, MESSAGE, CHECKPOINT)
    events = json.loads(run_cli("--db", any_url, "show", "--json", "--", EXP, TRIAL)[1])
    assert events["trial_id"] == TRIAL
    assert [e["error_message"] for e in events["events"] if e["error_message"]] == [MESSAGE] * 2
    assert events["events"][2]["node"]["hostname"] == MESSAGE[:40]
    for line in run_cli("--db", any_url, "tail", "--json", "--", EXP)[1].splitlines():
        assert json.loads(line)["trial_id"] == TRIAL
    # export to a terminal: JSON-escaped too; imported back, the very same text.
    code, out, err = run_cli("--db", any_url, "export", "--", EXP)
    assert_safe(code, out, err, "export")
    exported = [json.loads(line) for line in out.splitlines()]
    assert {e["trial_id"] for e in exported if e["kind"] == "event"} == {TRIAL}
    (tmp_path / "exp.jsonl").write_text(out, encoding="utf-8")
    imported = f"sqlite:///{tmp_path / 'imported.db'}"
    code, _, err = run_cli("--db", imported, "import", "--as", "copy", tmp_path / "exp.jsonl")
    assert code == 0, err
    (back,) = json.loads(run_cli("--db", imported, "trials", "--json", "--", "copy")[1])
    assert (back["trial_id"], back["last_error_message"], back["latest_checkpoint"]) == (
        TRIAL, MESSAGE, CHECKPOINT)

    # Pictures: the SVG parses (XML-illegal characters escaped), the HTML is whole, the PNG
    # draws a '$' as a dollar sign.
    root = ET.parse(tmp_path / "t.svg").getroot()
    (group,) = [g for g in root.iter("{http://www.w3.org/2000/svg}g")
                if g.get("class") == "trial"]
    assert group.get("data-trial-id") == visible(TRIAL)
    assert RAW.search((tmp_path / "t.html").read_text(encoding="utf-8")) is None
    code, _, err = run_cli("--db", any_url, "timeline", "-o", tmp_path / "t.png", "--", EXP)
    assert code == 0 and "Traceback" not in err
    reliability(Figures(
        scenario=f"Hostile text shown ({'PostgreSQL' if 'postgresql' in any_url else 'SQLite'})",
        injected="rich markup ([link=...], [rank0], [/mnt/ckpt]), OSC/CSI escapes, C1, bidi "
                 "override, lone surrogate in a trial id, messages, a path and a host; every "
                 "read command at 80 and 200 columns, --json, SVG/HTML/PNG timeline "
                 "(test_hostile_display.py)",
        times=len(commands) * 2 + 8, events_written=written, events_lost=0, duplicates=0,
        verify="ok; no raw control character in any output, JSON text exact",
    ))


# ------------------------------------------------------------------ one corrupted column


@pytest.fixture
def log_copy(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "fixture_exp"
    folder.mkdir()
    shutil.copyfile(FIXTURE, folder / "statemachine.db")
    yield folder / "statemachine.db"


def _break(db: Path, sql: str) -> tuple[int, str]:
    with closing(sqlite3.connect(db)) as conn, conn:
        position, trial_id = conn.execute(
            "SELECT position, trial_id FROM events WHERE trial_id = 'e_stopped' AND seq = 2"
        ).fetchone()
        conn.execute(sql, (position,))
    return int(position), str(trial_id)


CORRUPTIONS = {
    # name: (statement on the row, the field verify names, a fragment of its report)
    "recorded_at not a time": ("UPDATE events SET recorded_at = 'garbage' WHERE position = ?",
                               "recorded_at", "recorded_at 'garbage' is not a time"),
    "recorded_at a number": ("UPDATE events SET recorded_at = 12 WHERE position = ?",
                             "recorded_at", "is not a time"),
    "payload not JSON": ("UPDATE events SET payload = '{\"error\": [broken' WHERE position = ?",
                         "event", "not valid JSON"),
}


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_one_corrupted_column_is_reported_per_row_and_the_rest_works(
    log_copy: Path, corruption: str, reliability: Callable[[Figures], None]
) -> None:
    statement, field, fragment = CORRUPTIONS[corruption]
    position, trial_id = _break(log_copy, statement)

    code, out, err = run_cli("--db", log_copy, "verify", "--json", "fixture_exp")
    assert code == 1 and "Traceback" not in err
    divergence = json.loads(out)["experiments"][0]["divergence"]
    assert (divergence["position"], divergence["trial_id"], divergence["field"]) == (
        position, trial_id, field)
    assert fragment in divergence["text"] and f"position {position}" in divergence["text"]

    for args in (["experiments"], ["trials", "fixture_exp"], ["show", "fixture_exp", trial_id],
                 ["explain", "fixture_exp", trial_id], ["tail", "fixture_exp", "-n", "100"],
                 ["nodes", "fixture_exp"], ["experiments", "--json"],
                 ["trials", "fixture_exp", "--json"], ["show", "fixture_exp", trial_id, "--json"]):
        code, out, err = run_cli("--db", log_copy, *args)
        assert code in (0, 2) and "Traceback" not in err, (args, err)
        assert out.strip(), args
        for warning in err.splitlines():  # each names the row, once
            if not warning.startswith("trial-replay: warning:"):
                assert args[0] == "nodes" and "counted under 'unknown'" in warning
                continue
            assert f"position {position}" in warning and warning.count("position") == 1
    trials = json.loads(run_cli("--db", log_copy, "trials", "fixture_exp", "--json")[1])
    assert len(trials) == 6  # every trial still shown
    shown = json.loads(run_cli("--db", log_copy, "show", "fixture_exp", trial_id, "--json")[1])
    broken = next(e for e in shown["events"] if e["position"] == position)
    if field == "recorded_at":
        assert broken["recorded_at"] is None and broken["event"] == "TrialAdded"
        code, _, err = run_cli("--db", log_copy, "show", "fixture_exp", trial_id)
        assert code == 2 and fragment in err
    _COLUMNS_SEEN.add(corruption)
    if _COLUMNS_SEEN == set(CORRUPTIONS):
        reliability(Figures(
            scenario="One corrupted column",
            injected="raw sqlite3 on a copy of a real log (one copy each): recorded_at "
                     "'garbage', recorded_at 12, payload not JSON; verify and 9 reading "
                     "commands (test_hostile_display.py)",
            times=len(CORRUPTIONS), events_lost=0, duplicates=0,
            events_written=len(read_log(str(log_copy), "fixture_exp").rows),
            verify=f"each reported at its row and field ({len(CORRUPTIONS)}/"
                   f"{len(CORRUPTIONS)}); every other command exit 0 or 2, no traceback",
        ))


_COLUMNS_SEEN: set[str] = set()


# ------------------------------------------------------------------ absurd option values

ABSURD = ["nan", "inf", "-inf", "1e400", "99999999999999999999999", "-99999999999999999999999"]


def _numeric_options() -> list[tuple[list[str], str]]:
    """Every option of every command whose type is a number (or ``--at``)."""
    from statemachine.cli.params import AtType

    found = []
    commands: list[tuple[list[str], click.Command]] = []
    ctx = click.Context(cli)
    for name in cli.list_commands(ctx):  # commands are imported on first use: load each
        command = cli.get_command(ctx, name)
        assert command is not None
        if isinstance(command, click.Group):
            commands += [([name, sub], c) for sub, c in command.commands.items()]
        else:
            commands.append(([name], command))
    for path, command in commands:
        for param in command.params:
            if isinstance(param, click.Option) and isinstance(
                param.type, (click.types._NumberParamTypeBase, AtType)
            ):
                found.append((path, param.opts[-1]))
    return found


def test_every_numeric_option_refuses_absurd_values(
    tmp_path: Path, reliability: Callable[[Figures], None]
) -> None:
    db = tmp_path / "fixture.db"
    shutil.copyfile(FIXTURE, db)
    options = _numeric_options()
    assert {o for _, o in options} >= {"--at", "--lines", "--interval", "--max-failures",
                                       "--restore-retry-num"}
    for path, option in options:
        arguments = ["fixture_exp"] if path[0] not in ("demo", "db", "diagram") else []
        for value in ABSURD:
            code, out, err = run_cli("--db", db, *path, option, value, *arguments)
            assert code == 2, (path, option, value, out, err)
            lines = err.strip().splitlines()
            assert len(lines) == 1 and "Traceback" not in err, (path, option, value, err)
            assert lines[0].startswith("trial-replay: error:") and option in lines[0]
    reliability(Figures(
        scenario="Absurd option values",
        injected=f"every numeric option of every command ({len(options)}: "
                 f"{', '.join(sorted({o for _, o in options}))}) given "
                 f"{', '.join(ABSURD)} (test_hostile_display.py)",
        times=len(options) * len(ABSURD), events_written=0, events_lost=0, duplicates=0,
        verify="each exit 2 with one line naming the option; nothing written",
    ))


# ------------------------------------------------------------------ fuzz

storable = hostile_text(max_size=24, min_size=1).filter(
    lambda s: "\x00" not in s and not re.search("[\ud800-\udfff]", s) and s.strip() != ""
)


@settings(max_examples=8, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(experiment=storable, trial_id=storable,
       message=hostile_text(max_size=200) | hostile_text(max_size=4, min_size=1).map(
           lambda chunk: chunk * (20_000 // len(chunk))),
       checkpoint=hostile_text(max_size=60))
def test_fuzz_every_read_command_shows_arbitrary_text_safely(
    experiment: str, trial_id: str, message: str, checkpoint: str,
    reliability: Callable[[Figures], None],
) -> None:
    """Arbitrary text written through the real store: every read command (human at 80
    columns and --json) exits 0 with no traceback, no raw control character, and --json holds
    the exact text."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        url = f"sqlite:///{folder / 'fuzz.db'}"
        written = record_hostile(url, experiment, trial_id, message, checkpoint)
        for args in read_commands(experiment, trial_id, folder):
            assert_safe(*run_cli("--db", url, *args, env={"COLUMNS": "80"}), args)
        code, out, err = run_cli("--db", url, "trials", "--json", "--", experiment)
        assert_safe(code, out, err, "trials --json")
        (row,) = json.loads(out)
        assert (row["trial_id"], row["last_error_message"], row["latest_checkpoint"]) == (
            trial_id, message, checkpoint)
        code, out, err = run_cli("--db", url, "show", "--json", "--", experiment, trial_id)
        assert_safe(code, out, err, "show --json")
        shown = json.loads(out)
        assert (shown["experiment"], shown["trial_id"]) == (experiment, trial_id)
        code, out, err = run_cli("--db", url, "experiments", "--json")
        assert_safe(code, out, err, "experiments --json")
        assert [e["name"] for e in json.loads(out)] == [experiment]
    _FUZZED.append(written)
    reliability(Figures(
        scenario="Hostile text fuzz (every read command)",
        injected="hypothesis: experiment, trial id, message (up to 20 000 characters) and "
                 "checkpoint from arbitrary text (surrogates, controls, markup), through the "
                 "real store; every read command, human at 80 columns and --json "
                 "(test_hostile_display.py)",
        times=len(_FUZZED), events_written=sum(_FUZZED), events_lost=0, duplicates=0,
        verify="ok; exit 0, no traceback, no raw control character, JSON text exact",
    ))


_FUZZED: list[int] = []


def test_served_pages_show_hostile_text_safely(sqlite_url: str) -> None:
    """``trial-replay serve``'s pages: the same text is escaped for HTML and shown visibly,
    and every page can be sent as UTF-8 (a lone surrogate in a message used to break it)."""
    from contextlib import contextmanager

    from statemachine.cli.db import open_store
    from statemachine.cli.output import Output
    from statemachine.cli.web import Pages

    record_hostile(sqlite_url, EXP, TRIAL, MESSAGE, CHECKPOINT)

    @contextmanager
    def opened() -> Iterator[Any]:
        with open_store(sqlite_url) as store:
            yield store

    pages = Pages(opened, Output(db=sqlite_url))
    for page in (pages.index(), pages.experiment(EXP), pages.trial(EXP, TRIAL)):
        page.encode("utf-8")
        assert RAW.search(page) is None
    assert "[rank0]" in pages.experiment(EXP)
    assert "could not open [/mnt/ckpt]" in pages.trial(EXP, TRIAL)
    assert "\\x1b[2J" in pages.experiment(EXP)
