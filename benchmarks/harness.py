"""The one timing and table helper every benchmark section shares.

A section measures a few *paths* (ours and its baselines) on the same data in the same run,
several rounds each, interleaved (every round runs every path, in a rotating order, so that a
load spike on a shared 2-core machine hits all paths alike). A :class:`SectionTable` prints
each path as median, min and max, with its ratio to the row it is compared with and the
target it must meet; :class:`Report` collects the tables, the targets' verdicts and the
scaling points for the plot, and renders them for the terminal (rich) and for the README
(markdown).
"""

from __future__ import annotations

import contextlib
import gc
import importlib.metadata
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"

#: A path to time. It may return the seconds it measured itself (a float: for work that must
#: set up its data outside the timer); otherwise its whole call is timed.
Work = Callable[[], Any]


@dataclass(frozen=True)
class Stat:
    """Median, min and max of one path's rounds, in the table's unit."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: list[float]) -> Stat:
        """The statistic of ``values`` (one per round)."""
        return cls(statistics.median(values), min(values), max(values))

    def scaled(self, factor: float) -> Stat:
        """Every figure times ``factor``."""
        return Stat(self.median * factor, self.low * factor, self.high * factor)

    def inverted(self, numerator: float) -> Stat:
        """``numerator / value`` (seconds per unit into units per second); min and max swap."""
        return Stat(numerator / self.median, numerator / self.high, numerator / self.low)


def time_once(work: Work) -> float:
    """Seconds one call of ``work`` took (GC collected before, enabled during, as in real use)."""
    gc.collect()
    start = time.perf_counter()
    returned = work()
    elapsed = time.perf_counter() - start
    return float(returned) if isinstance(returned, float) else elapsed


def interleaved(works: dict[str, Work], rounds: int) -> dict[str, list[float]]:
    """Seconds per round of each path, the rounds interleaved in a rotating order."""
    names = list(works)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(time_once(works[name]))
    return times


def interleaved_ops(ops: dict[str, Work], count: int, rounds: int) -> dict[str, list[float]]:
    """Seconds per round of each path doing ``count`` operations, interleaved op by op.

    For short operations (one commit): every operation of every path is timed on its own,
    the paths taking turns (rotating who goes first), so a load spike or a slow disk moment
    hits every path alike. A round's figure is the sum over its operations (so rare costs,
    such as a snapshot every 100 records or a WAL checkpoint, are counted, not hidden).
    """
    names = list(ops)
    clock = time.perf_counter
    times: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(rounds):
        gc.collect()
        totals = dict.fromkeys(names, 0.0)
        for i in range(count):
            shift = i % len(names)
            for name in names[shift:] + names[:shift]:
                start = clock()
                ops[name]()
                totals[name] += clock() - start
        for name in names:
            times[name].append(totals[name])
    return times


def per_unit(seconds: list[float], units: int, scale: float = 1e6) -> Stat:
    """Rounds of ``units`` units each, as (default) microseconds per unit."""
    return Stat.of([s / units * scale for s in seconds])


@dataclass
class Verdict:
    """A target of the issue and what this run measured against it."""

    section: str
    figure: str
    target: str
    measured: str
    ok: bool
    note: str = ""


@dataclass
class _Row:
    label: str
    stat: Stat | None
    ratio: str
    target: str
    verdict: str
    note: str


class SectionTable:
    """One table: each row a path, its median (min - max), its ratio to a baseline, a target."""

    def __init__(self, report: Report, section: str, title: str, unit: str) -> None:
        """Use :meth:`Report.table`."""
        self.report = report
        self.section = section
        self.title = title
        self.unit = unit
        self.rows: list[_Row] = []
        self.notes: list[str] = []

    def add(
        self,
        label: str,
        stat: Stat | None,
        *,
        versus: Stat | None = None,
        target: str = "",
        ok: bool | None = None,
        measured: str | None = None,
        note: str = "",
    ) -> None:
        """A row. ``versus``: the baseline for the ratio column (``ours / baseline``).

        ``target`` with ``ok`` also records a :class:`Verdict` (``measured`` says what was
        compared, by default the ratio or the median).
        """
        ratio = f"{stat.median / versus.median:.2f}x" if stat and versus and versus.median else ""
        verdict = "" if ok is None else ("ok" if ok else "MISSED")
        shown_note = measured if stat is None and measured else note
        self.rows.append(_Row(label, stat, ratio, target, verdict, shown_note))
        if ok is not None:
            shown = measured or ratio or (f"{stat.median:,.3g} {self.unit}" if stat else "-")
            self.report.verdicts.append(
                Verdict(self.section, label, target, shown, ok, note)
            )

    def skip(self, label: str, reason: str) -> None:
        """A row that was not measured, and why."""
        self.rows.append(_Row(label, None, "", "", "skipped", reason))

    def note(self, text: str) -> None:
        """A line printed under the table."""
        self.notes.append(text)

    # ------------------------------------------------------------ rendering

    def _cells(self, row: _Row) -> list[str]:
        if row.stat is None:  # a derived figure (in the note), or a skipped path (why)
            return [row.label, row.note or "-", "", "", row.target, row.verdict]
        fmt = _fmt_for(row.stat)
        return [
            row.label,
            fmt(row.stat.median),
            f"{fmt(row.stat.low)} - {fmt(row.stat.high)}",
            row.ratio,
            row.target,
            row.verdict,
        ]

    def rich(self) -> Table:
        """The table for the terminal."""
        table = Table(title=self.title, title_justify="left")
        for column in ("path", self.unit, "min - max", "ratio", "target", ""):
            table.add_column(column, justify="left" if column in ("path", "") else "right")
        for row in self.rows:
            cells = self._cells(row)
            if row.verdict == "MISSED":
                cells[-1] = "[bold red]MISSED[/]"
            elif row.verdict == "ok":
                cells[-1] = "[green]ok[/]"
            table.add_row(*cells)
        return table

    def markdown(self) -> str:
        """The table as GitHub markdown, notes below it."""
        lines = [f"**{self.title}**", ""]
        lines.append(f"| path | {self.unit} | min - max | ratio | target | |")
        lines.append("|---|---:|---:|---:|---:|---|")
        for row in self.rows:
            cells = [c.replace("|", "\\|") for c in self._cells(row)]
            if row.verdict == "MISSED":
                cells[-1] = "**MISSED**"
            lines.append("| " + " | ".join(cells) + " |")
        lines += [""] + [f"- {n}" for n in self.notes] + ([""] if self.notes else [])
        return "\n".join(lines)


def _fmt_for(stat: Stat) -> Callable[[float], str]:
    top = max(abs(stat.median), abs(stat.high))
    if top >= 1000:
        return lambda v: f"{v:,.0f}"
    if top >= 10:
        return lambda v: f"{v:,.1f}"
    if top >= 0.1:
        return lambda v: f"{v:,.2f}"
    return lambda v: f"{v:,.4f}"


@dataclass
class Report:
    """Everything one run printed: tables, verdicts, scaling points for the plot."""

    console: Console
    tables: list[SectionTable] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    #: ``{series name: [(x, y), ...]}`` per plot panel name, for the PNG.
    scaling: dict[str, dict[str, list[tuple[float, float]]]] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)

    def table(self, section: str, title: str, unit: str) -> SectionTable:
        """A new table of ``section`` (printed by :meth:`print_table`)."""
        table = SectionTable(self, section, title, unit)
        self.tables.append(table)
        return table

    def print_table(self, table: SectionTable) -> None:
        """Print a finished table now (so a long run shows progress)."""
        self.console.print(table.rich())
        for note in table.notes:
            self.console.print(f"  {note}")
        self.console.print()

    def say(self, text: str) -> None:
        """A message printed now and kept for the markdown."""
        self.messages.append(text)
        self.console.print(text)

    def point(self, panel: str, series: str, x: float, y: float) -> None:
        """One point of a scaling curve."""
        self.scaling.setdefault(panel, {}).setdefault(series, []).append((x, y))

    def verdict_table(self) -> SectionTable:
        """The issue's targets and this run's verdict on each."""
        summary = SectionTable(self, "targets", "Targets of the issue", "measured")
        for v in self.verdicts:
            summary.rows.append(
                _Row(f"{v.section}: {v.figure}", None, "", v.target, "ok" if v.ok else "MISSED",
                     v.note)
            )
        return summary

    def print_verdicts(self) -> None:
        """The targets table (measured value in the second column)."""
        table = Table(title="Targets of the issue", title_justify="left")
        for column in ("section: figure", "measured", "target", ""):
            table.add_column(column)
        for v in self.verdicts:
            table.add_row(f"{v.section}: {v.figure}", v.measured, v.target,
                          "[green]ok[/]" if v.ok else "[bold red]MISSED[/]")
        self.console.print(table)

    def markdown(self, header: str) -> str:
        """The whole run as markdown: header, every table, the targets."""
        parts = [header, ""]
        for table in self.tables:
            parts.append(table.markdown())
        parts.append("**Targets of the issue**\n")
        parts.append("| section: figure | measured | target | |")
        parts.append("|---|---:|---:|---|")
        for v in self.verdicts:
            parts.append(f"| {v.section}: {v.figure} | {v.measured} | {v.target} | "
                         f"{'ok' if v.ok else '**MISSED**'} |")
        return "\n".join(parts) + "\n"


@dataclass
class Context:
    """What every section gets: sizes, rounds, a scratch folder, PostgreSQL, the report."""

    quick: bool
    rounds: int
    workdir: Path
    pg_url: str | None
    pg_reason: str
    report: Report

    def size(self, full: int, quick: int) -> int:
        """``full`` normally, ``quick`` under ``--quick``."""
        return quick if self.quick else full

    def sqlite_url(self, name: str) -> str:
        """A new SQLite file in the scratch folder."""
        path = self.workdir / f"{name}-{uuid.uuid4().hex[:6]}.db"
        return f"sqlite:///{path}"

    @contextlib.contextmanager
    def pg_schema(self) -> Iterator[tuple[str, str]]:
        """A fresh PostgreSQL schema: ``(SQLAlchemy URL on it, libpq conninfo on it)``.

        Dropped afterwards. Only call when :attr:`pg_url` is set.
        """
        import psycopg
        from sqlalchemy.engine import make_url

        assert self.pg_url is not None
        url = make_url(self.pg_url)
        libpq = url.set(drivername="postgresql").render_as_string(hide_password=False)
        schema = f"sm_bench_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(libpq, autocommit=True) as admin:
            admin.execute(f'CREATE SCHEMA "{schema}"')
        try:
            yield (
                url.update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(
                    hide_password=False
                ),
                f"{libpq}{'&' if '?' in libpq else '?'}options=-csearch_path%3D{schema}",
            )
        finally:
            with psycopg.connect(libpq, autocommit=True) as admin:
                admin.execute(f'DROP SCHEMA "{schema}" CASCADE')


def pg_reachable(url: str) -> str | None:
    """``None`` if a PostgreSQL server answers at ``url``, else why not (one line)."""
    try:
        import psycopg
        from sqlalchemy.engine import make_url
    except ImportError as exc:
        return f"psycopg is not installed ({exc}); pip install -e '.[bench]'"
    libpq = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    try:
        psycopg.connect(libpq, connect_timeout=3).close()
    except psycopg.Error as exc:
        return f"PostgreSQL not reachable at {make_url(url)!s}: {str(exc).strip().splitlines()[0]}"
    return None


def versions() -> str:
    """Python, SQLite and the packages the figures depend on, one line."""
    import sqlite3

    parts = [f"Python {platform.python_version()}", f"SQLite {sqlite3.sqlite_version}"]
    from statemachine.distribution import DISTRIBUTION

    for package in (DISTRIBUTION, "transitions", "SQLAlchemy", "psycopg", "ray",
                    "eventsourcing", "optuna"):
        try:
            parts.append(f"{package} {importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            parts.append(f"{package} (not installed)")
    return ", ".join(parts)


def machine() -> str:
    """CPU count, model, memory and OS, one line."""
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    memory = ""
    with contextlib.suppress(OSError, ValueError, IndexError):
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        memory = f", {kb / 2**20:.0f} GiB"
    return f"{os.cpu_count()} cores ({model}){memory}, {platform.system()} {platform.release()}"


@contextlib.contextmanager
def scratch() -> Iterator[Path]:
    """A scratch folder on the same disk as the temporary folder, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="sm-bench-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def python() -> str:
    """This interpreter (for child processes)."""
    return sys.executable


def peak_rss_mib(code: str, *args: str) -> float:
    """Peak resident memory (MiB) of a fresh interpreter running ``code`` with ``args``.

    The child imports what ``code`` imports and runs it once; its high-water mark
    (``VmHWM``) at exit is the figure (interpreter and imports included, alike for every
    path compared). Not ``ru_maxrss``: Linux carries the parent's over ``fork``.
    """
    import subprocess

    wrapper = (
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})\n"
        f"{code}\n"
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0]\n"
        "print('RSS', hwm.split()[1])\n"
    )
    done = subprocess.run([python(), "-c", wrapper, *args], capture_output=True, text=True,
                          check=False, timeout=1800)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RSS ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"memory probe failed: {done.stderr.strip()[-500:]}")
    return int(lines[-1].split()[1]) / 1024
