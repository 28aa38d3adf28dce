"""The one output layer of the CLI: rich tables for people, stable JSON for scripts.

Commands build plain JSON-safe data (see :mod:`statemachine.cli.schema`), then either print
it as JSON (``--json``) or hand it to a renderer that draws rich tables. Warnings (a corrupted
row skipped, for instance) go to stderr as one line each and make the exit code 2.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from statemachine.cli.palette import STATUS_STYLE

#: Columns whose cells are never wrapped (ids, statuses and decisions are copied and searched).
NO_WRAP = frozenset({"decision", "last decision", "event", "status", "ip", "node-id"})


def dumps(data: Any) -> str:
    """The CLI's JSON form: two-space indent, keys in the order the schema builds them."""
    return json.dumps(data, indent=2, ensure_ascii=False)


class Output:
    """Per-invocation context: the ``--db`` value, the consoles and the exit code so far."""

    def __init__(self, db: str | None) -> None:
        self.db = db
        self.exit_code = 0

    @property
    def console(self) -> Console:
        """A rich console on the current stdout (wide when not a terminal, so rows stay whole)."""
        out = sys.stdout
        width = None if out.isatty() or os.environ.get("COLUMNS") else 160
        return Console(file=out, width=width, soft_wrap=False, highlight=False)

    def json(self, data: Any) -> None:
        """Print ``data`` as the command's JSON output."""
        click.echo(dumps(data))

    def json_line(self, data: Any) -> None:
        """Print ``data`` as one compact JSON line (streams: ``tail``, ``export``)."""
        click.echo(json.dumps(data, ensure_ascii=False, separators=(",", ":")))

    def warn(self, message: str) -> None:
        """One warning line on stderr; the command will exit 2."""
        click.echo(f"trial-replay: warning: {' '.join(message.split())}", err=True)
        self.exit_code = 2

    def note(self, message: str) -> None:
        """One informational line on stderr (never changes the exit code)."""
        click.echo(message, err=True)

    def table(
        self,
        columns: Sequence[str],
        rows: Iterable[Sequence[Any]],
        *,
        title: str | None = None,
        status_column: str | None = "status",
    ) -> None:
        """Print a rich table; cells of the ``status_column`` are coloured by status."""
        table = Table(title=title, title_justify="left", header_style="bold")
        index = columns.index(status_column) if status_column in columns else -1
        for i, name in enumerate(columns):
            # Ids and statuses are never folded: people search and copy them.
            keep = i in (0, index) or name in NO_WRAP
            table.add_column(name, overflow="fold", no_wrap=keep)
        for row in rows:
            cells = ["" if v is None else str(v) for v in row]
            if index >= 0 and cells[index] in STATUS_STYLE:
                cells[index] = f"[{STATUS_STYLE[cells[index]]}]{cells[index]}[/]"
            table.add_row(*cells)
        self.console.print(table)

    def lines(self, rows: Iterable[tuple[str, str]]) -> None:
        """Two columns without borders: a short label, then text wrapped under itself."""
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True, style="dim")
        grid.add_column(overflow="fold")
        for label, text in rows:
            grid.add_row(label, Text(text))
        self.console.print(grid)

    def text(self, line: str = "", *, style: str | None = None) -> None:
        """Print one line of (rich-markup-free) text."""
        self.console.print(line, style=style, markup=False, highlight=False)


def json_option(func: Any) -> Any:
    """The ``--json`` flag every command takes."""
    return click.option(
        "--json", "as_json", is_flag=True, help="Print JSON (schema in docs/cli.md)."
    )(func)
