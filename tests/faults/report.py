"""Render the fault scenarios' figures as the table of ``docs/reliability.md``.

The tests write their figures to the JSON file named by ``STATEMACHINE_RELIABILITY_REPORT``;
this script turns that file into a Markdown table, and with ``--update FILE`` puts it between
the ``<!-- reliability-table -->`` markers of FILE (the doc is regenerated, never typed)::

    STATEMACHINE_RELIABILITY_REPORT=/tmp/reliability.json python -m pytest tests/faults
    python tests/faults/report.py /tmp/reliability.json --update docs/reliability.md
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

START, END = "<!-- reliability-table:start -->", "<!-- reliability-table:end -->"
COLUMNS = ("scenario", "what was injected", "times", "events written", "events lost",
           "duplicates", "verify")

#: Table order: the scenarios of the issue, in its order (others follow by name).
ORDER = [
    "PostgreSQL restarted mid-run",
    "SQLite write-locked",
    "Disk full",
    "Two drivers on one experiment",
    "Driver SIGKILLed and resumed",
    "Checkpoint deletion",
    "Hostile names (SQLite)",
    "Hostile names (PostgreSQL)",
    "Rows broken behind the log's back",
    "One corrupted column",
    "Hostile text shown (SQLite)",
    "Hostile text shown (PostgreSQL)",
    "Absurd option values",
    "Hostile text fuzz (every read command)",
    "Rows that disagree with each other",
    "Hostile export files",
    "Reading a log that must not change",
    "Log file deleted mid-run",
    "Disk full through the API",
    "Disk full to the end of a run",
    "Bad copies on storage",
    "Uploader SIGKILLed mid-upload",
    "Concurrent writers and readers (SQLite)",
    "Concurrent writers and readers (PostgreSQL)",
]


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def render(data: dict[str, Any]) -> str:
    """The Markdown table of every scenario in ``data`` (the report file's content)."""
    scenarios = data.get("scenarios", {})
    names = [n for n in ORDER if n in scenarios] + sorted(n for n in scenarios if n not in ORDER)
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for name in names:
        s = scenarios[name]
        lines.append("| " + " | ".join(_cell(v) for v in (
            s["scenario"], s["injected"], s["times"], s["events_written"], s["events_lost"],
            s["duplicates"], s["verify"],
        )) + " |")
    return "\n".join(lines) + "\n"


def update(doc: Path, table: str) -> None:
    """Replace the table between the markers of ``doc``."""
    text = doc.read_text(encoding="utf-8")
    if START not in text or END not in text:
        raise SystemExit(f"{doc}: no {START} ... {END} markers to put the table between")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    doc.write_text(f"{head}{START}\n{table}{END}{tail}", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", nargs="?", default=os.environ.get(
        "STATEMACHINE_RELIABILITY_REPORT"), help="the figures (JSON) the tests wrote")
    parser.add_argument("--update", type=Path, metavar="FILE",
                        help="put the table into FILE between its markers")
    args = parser.parse_args(argv)
    if not args.report:
        parser.error("give the report file, or set STATEMACHINE_RELIABILITY_REPORT")
    path = Path(args.report)
    if not path.is_file():
        parser.error(f"no report file at {path}: run the tests with "
                     "STATEMACHINE_RELIABILITY_REPORT set first")
    table = render(json.loads(path.read_text(encoding="utf-8")))
    if args.update:
        update(args.update, table)
    else:
        sys.stdout.write(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
