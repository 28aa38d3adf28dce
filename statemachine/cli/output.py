"""The one output layer of the CLI: rich tables for people, stable JSON for scripts.

Commands build plain JSON-safe data (see :mod:`statemachine.cli.schema`), then either print
it as JSON (``--json``) or hand it to this module's renderers. Every value a renderer prints
goes through :mod:`statemachine.cli.safe_text` (markup never interpreted, control characters
shown escaped), so no command can print log text raw. Warnings (a corrupted row skipped, for
instance) go to stderr as one line each and make the exit code 2.

Tables fit the terminal: each column has a priority, and at a narrow width the least
important columns are dropped (and named under the table) until the rest fit without
breaking a value mid-word; ``--wide`` shows every column at full width.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal

import click
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from statemachine.cli.palette import STATUS_STYLE
from statemachine.cli.safe_text import cell, json_safe, one_line, visible

#: Width of a table when stdout is not a terminal and ``COLUMNS`` is not set.
PIPE_WIDTH = 160
#: A prose column (messages, notes) is never narrower than this, words permitting.
MIN_PROSE = 16
#: Rows of a table rendered at once (a long listing is printed block by block).
TABLE_BLOCK_ROWS = 1000


def dumps(data: Any) -> str:
    """The CLI's JSON form: two-space indent, keys in the order the schema builds them, the
    exact text of the log (control characters and lone surrogates as JSON escapes)."""
    return json_safe(json.dumps(data, indent=2, ensure_ascii=False))


def now() -> datetime:
    """The current time (UTC) relative times are counted from (tests pin it)."""
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class Column:
    """One column of a table: its header, how important it is, how its cells are laid out.

    ``priority`` 0 is never dropped; at a narrow width columns are dropped from the highest
    priority number down (the rightmost first among equals). A ``prose`` column wraps at
    spaces (never inside a word: a word longer than the column ends in an ellipsis); any
    other column keeps each value whole on one line.
    """

    header: str
    priority: int = 0
    prose: bool = False
    justify: Literal["left", "right"] = "left"
    status: bool = False
    """Cells are statuses, coloured by :data:`STATUS_STYLE`."""


def _words(text: str) -> list[str]:
    return text.split() or [""]


def _overhead(n: int) -> int:
    """Characters a table of ``n`` columns adds to its cells (padding and separators)."""
    return 3 * max(n - 1, 0) + 2


def fit_columns(
    columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int | None
) -> tuple[list[int], list[int]]:
    """Which columns to show and how wide: ``(indexes kept, widths)``.

    ``width`` ``None`` (``--wide``): every column, each as wide as its widest value.
    """
    natural = [
        max([len(c.header), *(len(r[i]) for r in rows)]) for i, c in enumerate(columns)
    ]
    least = []
    for i, c in enumerate(columns):
        header_word = max(len(w) for w in _words(c.header))
        if c.prose:
            word = max([header_word, *(len(w) for r in rows for w in _words(r[i]))])
            least.append(min(natural[i], max(word, MIN_PROSE)))
        else:
            least.append(natural[i])  # kept whole, header included
    kept = list(range(len(columns)))
    if width is None:
        return kept, [natural[i] for i in kept]
    # Most important first (leftmost among equals); each column is taken if it still fits.
    kept = [i for i in kept if columns[i].priority == 0]
    for i in sorted(set(range(len(columns))) - set(kept), key=lambda i: (columns[i].priority, i)):
        if sum(least[j] for j in kept) + least[i] + _overhead(len(kept) + 1) <= width:
            kept.append(i)
    kept.sort()
    widths = {i: least[i] for i in kept}
    spare = width - sum(widths.values()) - _overhead(len(kept))
    prose = [i for i in kept if columns[i].prose]
    deficit = {i: natural[i] - widths[i] for i in prose if natural[i] > widths[i]}
    total = sum(deficit.values())
    if spare > 0 and total:  # share what is left among the prose columns, as they lack it
        for i, lack in deficit.items():
            widths[i] += min(lack, spare * lack // total)
    return kept, [widths[i] for i in kept]


class Output:
    """Per-invocation context: the ``--db`` value, the layout and the exit code so far."""

    def __init__(self, db: str | None, *, as_json: bool = False) -> None:
        self.db = db
        self.as_json = as_json
        """``--json`` given before the command (each command's own ``--json`` reads it)."""
        self.exit_code = 0
        self.wide = False
        """``--wide``: every column, every value in full (for a pager or a file)."""

    @property
    def width(self) -> int:
        """The width tables fit: the terminal's, ``COLUMNS``, else :data:`PIPE_WIDTH`."""
        columns = os.environ.get("COLUMNS", "")
        if columns.isdigit() and int(columns) > 0:
            return int(columns)
        if sys.stdout.isatty():
            return Console(file=sys.stdout).width
        return PIPE_WIDTH

    def console(self, width: int | None = None) -> Console:
        """A rich console on the current stdout, ``width`` wide (else :attr:`width`)."""
        return Console(file=sys.stdout, width=width or self.width, soft_wrap=False,
                       highlight=False, markup=False, emoji=False)

    def json(self, data: Any) -> None:
        """Print ``data`` as the command's JSON output."""
        click.echo(dumps(data))

    def json_line(self, data: Any) -> None:
        """Print ``data`` as one compact JSON line (streams: ``tail``)."""
        click.echo(json_safe(json.dumps(data, ensure_ascii=False, separators=(",", ":"))))

    def warn(self, message: str) -> None:
        """One warning line on stderr; the command will exit 2."""
        click.echo(f"trial-replay: warning: {one_line(message)}", err=True)
        self.exit_code = 2

    def note(self, message: str) -> None:
        """One informational line on stderr (never changes the exit code)."""
        click.echo(one_line(message), err=True)

    def echo(self, line: str) -> None:
        """One line of plain text on stdout, control characters escaped (``tail``)."""
        click.echo(visible(line))

    def table(
        self,
        columns: Sequence[Column | str],
        rows: Iterable[Sequence[Any]],
        *,
        title: str | None = None,
        status_column: str | None = "status",
    ) -> None:
        """Print a table fitted to the terminal (see :func:`fit_columns`); a column given
        as a plain header string is a priority-0 column."""
        specs = [
            c if isinstance(c, Column) else Column(c, status=c == status_column)
            for c in columns
        ]
        cells = [[visible(v) for v in row] for row in rows]
        kept, widths = fit_columns(specs, cells, None if self.wide else self.width)
        total = sum(widths) + _overhead(len(kept))
        console = self.console(max(total, self.width) if self.wide else None)
        # Rendered a block of rows at a time with the widths fitted to every row: the same
        # text as one table, but rich holds one block's rendering, not a 100k-row table's.
        for start in range(0, max(len(cells), 1), TABLE_BLOCK_ROWS):
            first = start == 0
            table = Table(title=cell(title) if title and first else None,
                          title_justify="left", header_style="bold", box=box.SIMPLE_HEAD,
                          show_edge=False, show_header=first, collapse_padding=False)
            for i, w in zip(kept, widths, strict=True):
                spec = specs[i]
                table.add_column(Text(spec.header), justify=spec.justify, width=w,
                                 no_wrap=not spec.prose, overflow="ellipsis")
            for row in cells[start:start + TABLE_BLOCK_ROWS]:
                table.add_row(*(
                    Text(row[i], style=STATUS_STYLE.get(row[i], "") if specs[i].status
                         else "")
                    for i in kept
                ))
            console.print(table)
        hidden = [specs[i].header for i in range(len(specs)) if i not in kept]
        if hidden:
            console.print(Text(f"(not shown at this width: {', '.join(hidden)}; --wide "
                               "shows every column)", style="dim"))

    def lines(self, rows: Iterable[tuple[str, str]]) -> None:
        """Two columns without borders: a short label, then text wrapped under itself."""
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True, style="dim")
        grid.add_column(overflow="fold")
        for label, text in rows:
            grid.add_row(cell(label), cell(text))
        self.console(10**6 if self.wide else None).print(grid)

    def text(self, line: str = "", *, style: str | None = None) -> None:
        """Print one line of text, shown literally (no markup, controls escaped)."""
        self.console(10**6 if self.wide else None).print(cell(line, style or ""))


def _json_flag(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    out = ctx.find_object(Output)
    return bool(value or (out is not None and out.as_json))


def json_option(func: Any) -> Any:
    """The ``--json`` flag every command takes (also given before the command: then
    :attr:`Output.as_json` is set and the flag reads it)."""
    return click.option(
        "--json", "as_json", is_flag=True, callback=_json_flag,
        help="Print JSON (schema in docs/cli.md); also accepted before the command.",
    )(func)


def _set_wide(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    out = ctx.find_object(Output)
    if out is not None:
        out.wide = value
    return value


def wide_option(func: Any) -> Any:
    """The ``--wide`` flag of the commands that print tables (sets :attr:`Output.wide`)."""
    return click.option(
        "--wide", is_flag=True, expose_value=False, callback=_set_wide,
        help="Every column, every value in full (for a pager: less -S, or a file).",
    )(func)


def relative_time(moment: str | None, *, reference: datetime | None = None) -> str:
    """An ISO time as people scan it: ``45s ago``, ``12m ago``, ``3h ago``, ``5d ago``, else
    the date (empty for ``None``; the text as it is if it is not a time)."""
    if not moment:
        return ""
    try:
        when = datetime.fromisoformat(moment)
    except ValueError:
        return moment
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    seconds = ((reference or now()) - when).total_seconds()
    if seconds < 0:
        return when.strftime("%Y-%m-%d %H:%M")
    for unit, size in (("s", 1), ("m", 60), ("h", 3600), ("d", 86400)):
        if seconds < size * (60 if unit in "sm" else 24 if unit == "h" else 30):
            return f"{int(seconds // size)}{unit} ago"
    return when.strftime("%Y-%m-%d")


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``1 failure``, ``2 failures``, ``0 failures``: a count with its noun agreeing."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


def clock_time(moment: str | None) -> str:
    """An ISO time as ``YYYY-MM-DD HH:MM:SS.mmm`` (UTC; empty for ``None``): milliseconds
    always shown, also for a whole second (whose ISO form has none)."""
    if not moment:
        return ""
    try:
        when = datetime.fromisoformat(moment)
    except ValueError:
        return moment
    if when.tzinfo is not None:
        when = when.astimezone(timezone.utc)
    return when.strftime("%Y-%m-%d %H:%M:%S.%f")[:23]


def basename(path: str | None) -> str:
    """The last component of a checkpoint path (``--wide`` and ``--json`` have it whole)."""
    if not path:
        return ""
    trimmed = path.rstrip("/\\")
    return trimmed.replace("\\", "/").rsplit("/", 1)[-1] or path
