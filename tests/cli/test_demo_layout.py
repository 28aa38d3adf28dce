"""What ``trial-replay demo`` prints after its experiment ran (issue 29, item 1): under each
``$ trial-replay ...`` line exactly what that command prints, at 80, 120 and 200 columns
(golden files), and a spinner line that is cleared before each line of the story.

The report is printed from the committed fixture log (the Ray run itself is
tests/cli/test_demo.py's, slow); it is the same code the demo runs on its own log. After
changing a layout on purpose, regenerate and review the diff::

    UPDATE_GOLDEN=1 python -m pytest tests/cli/test_demo_layout.py
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import click
import pytest

from statemachine.cli import main
from statemachine.cli.demo import Progress, read_outcome, report
from statemachine.cli.invocation import program
from statemachine.cli.output import Output
from tests.cli.conftest import EXP, GOLDEN
from tests.cli.test_layout import UPDATE

WIDTHS = (80, 120, 200)


def _report(experiment_dir: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    outcome = read_outcome(experiment_dir, EXP, Output(db=None))
    code = report(experiment_dir, EXP, outcome, main, click.echo)
    return code, capsys.readouterr().out


def _sections(text: str) -> list[tuple[list[str], str]]:
    """Each ``$ trial-replay ARGS`` line's arguments and the text under it (to the blank
    line that ends the command's output, and its "Try:" lines excluded)."""
    parts = re.split(r"^\$ (.*)\n", text, flags=re.MULTILINE)
    sections = []
    for command, body in zip(parts[1::2], parts[2::2], strict=True):
        args = command.split()[1:]  # after the program (a path or trial-replay)
        sections.append((args, body.split("\nTry: ", 1)[0].rstrip("\n")))
    return sections


@pytest.mark.parametrize("width", WIDTHS)
def test_the_demo_prints_exactly_what_the_commands_it_names_print(
    experiment_dir: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch, width: int,
) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    monkeypatch.delenv("STATEMACHINE_DB_URL", raising=False)
    code, text = _report(experiment_dir, capsys)
    assert code == 0
    sections = _sections(text)
    assert [args[2] for args in (s[0] for s in sections)] == ["trials", "explain"]
    assert sections[1][0][-1] == "c_given_up"  # the trial that gave up is the one explained
    for args, shown in sections:
        assert main(args) == 0
        printed = capsys.readouterr().out
        assert shown == printed.rstrip("\n"), args
    for line in text.splitlines():  # only the paste-able command lines may be wider
        if not line.startswith(("$ ", "Try: ", "     ")):
            assert len(line.rstrip()) <= width, line
    assert "…" not in text  # nothing cut short: the commands drop columns instead
    golden = GOLDEN / "layout" / f"demo_{width}.txt"
    normalised = text.replace(str(experiment_dir), "{folder}").replace(program(), "trial-replay")
    normalised = "\n".join(line.rstrip() for line in normalised.splitlines()) + "\n"
    if UPDATE:
        golden.write_text(normalised, encoding="utf-8")
    assert normalised == golden.read_text(encoding="utf-8")


# ------------------------------------------------------------------ the spinner


def _screen(stream: str) -> list[str]:
    """The lines a terminal shows after ``stream``: text, ``\\r``, ``\\n``, erase line
    (``ESC[2K``) and cursor up (``ESC[1A``); other escape sequences draw nothing."""
    lines, row, col = [""], 0, 0
    for token in re.findall(r"\x1b\[[0-9;?]*[A-Za-z]|\r|\n|[^\x1b\r\n]+", stream):
        if token == "\n":
            row += 1
            col = 0
            if row == len(lines):
                lines.append("")
        elif token == "\r":
            col = 0
        elif token == "\x1b[2K":
            lines[row] = ""
        elif re.fullmatch(r"\x1b\[\d*A", token):
            row = max(row - int(token[2:-1] or 1), 0)
        elif token.startswith("\x1b"):
            continue
        else:
            line = lines[row].ljust(col)
            lines[row] = line[:col] + token + line[col + len(token):]
            col += len(token)
    return lines


def test_each_line_of_the_story_clears_the_spinner_first(tmp_path: Path) -> None:
    from rich.console import Console

    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=100)

    def echo(text: str) -> None:  # stdout on the same terminal as the spinner's stderr
        screen.write(text + "\n")

    with Progress(tmp_path / "none" / "statemachine.db", echo, console) as progress:
        progress.say("Driver 1: Tuner.fit() of 2 trials")
        progress.begin("Driver 1: Tuner.fit()")
        progress.tick()
        progress.say("Driver 1 killed with SIGKILL during restore attempt 2")
        progress.begin("Driver 2: Tuner.restore()")
        progress.tick()
    echo("Done in 60 s.")
    shown = [line.rstrip() for line in _screen(screen.getvalue()) if line.strip()]
    assert shown == ["Driver 1: Tuner.fit() of 2 trials",
                     "Driver 1 killed with SIGKILL during restore attempt 2",
                     "Done in 60 s."], shown
    assert "starting Ray" in screen.getvalue()  # the spinner was drawn, then cleared
