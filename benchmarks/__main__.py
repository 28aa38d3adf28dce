"""Run the benchmarks: ``python -m benchmarks`` (from the repository root).

Every figure is printed beside its baselines, measured in the same run on the same data:
medians over several rounds, with the min and max. ``--quick`` is a small smoke run (a few
seconds per section; its numbers are not the figures). ``--section`` picks sections.
``--markdown`` writes the tables (for ``benchmarks/README.md``), ``--plot`` the scaling PNG.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import click
from rich.console import Console

from benchmarks.harness import (
    DEFAULT_PG_URL,
    Context,
    Report,
    machine,
    pg_reachable,
    scratch,
    versions,
)

#: Section name -> (module, what it measures). In run order.
SECTIONS = {
    "fold": ("benchmarks.fsm", "fold cost per event: transitions, compiled table, dict table"),
    "writes": ("benchmarks.writes", "one durable record and group commit vs the raw driver"),
    "replay": ("benchmarks.replay", "fold an experiment read from SQLite vs raw read + dict fold"),
    "open": ("benchmarks.open_scaling", "open 1k..100k trials x 20 events with snapshots"),
    "peers": ("benchmarks.peers", "eventsourcing and Optuna storages on the same work"),
    "scaleout": ("benchmarks.scaleout", "8 drivers appending to one PostgreSQL at once"),
    "tune": ("benchmarks.tune_overhead", "a Ray Tune run with and without the callback"),
    "tune-busy": ("benchmarks.tune_busy", "a busy Tune driver: 100 trials x 50 checkpoints"),
    "resume": ("benchmarks.resume", "a driver crash and resume: iterations redone, with and "
               "without the callback"),
    "upload": ("benchmarks.log_upload", "the log's copy to S3: upload cost, what the loop pays"),
    "ingest": ("benchmarks.ingest", "ingest of a 1,000-trial Ray folder vs a raw read"),
    "advise": ("benchmarks.advise", "advise: 100 policies swept over a 10,000-trial experiment"),
    "read": ("benchmarks.read", "the CLI's read commands on a big shared log vs raw SQL"),
    "web": ("benchmarks.web_page", "serve's experiment page at 1k..100k trials: size, time"),
}
#: Left out of ``--quick`` unless named with ``--section`` (Ray start-up alone takes ~10 s;
#: ``upload`` starts an S3 server and has its own quick test).
NOT_QUICK = ("tune", "tune-busy", "resume", "upload")


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--quick", is_flag=True, help="Small sizes, 3 rounds: a smoke run, not figures.")
@click.option("--section", "sections", multiple=True, type=click.Choice(list(SECTIONS)),
              help="Run only these sections (repeatable). Default: all.")
@click.option("--rounds", type=int, default=None,
              help="Rounds per figure (default 5; 3 with --quick).")
@click.option("--pg-url", default=lambda: os.environ.get("STATEMACHINE_TEST_PG_URL",
                                                         DEFAULT_PG_URL),
              show_default="$STATEMACHINE_TEST_PG_URL or the local test server",
              help="PostgreSQL server for the PostgreSQL figures (skipped if unreachable).")
@click.option("--no-postgres", is_flag=True, help="Skip every PostgreSQL figure.")
@click.option("--markdown", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the tables as markdown to this file.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path),
              help="Also draw the scaling runs to this PNG (needs matplotlib).")
def main(quick: bool, sections: tuple[str, ...], rounds: int | None, pg_url: str,
         no_postgres: bool, markdown: Path | None, plot: Path | None) -> None:
    """Performance at scale, every figure beside its baselines measured in the same run."""
    console = Console(width=150)
    report = Report(console)
    chosen = list(sections) or [s for s in SECTIONS if not (quick and s in NOT_QUICK)]
    reason = "--no-postgres given" if no_postgres else pg_reachable(pg_url)
    started = datetime.now(timezone.utc)
    header = (f"Run {started:%Y-%m-%d %H:%M} UTC{' (--quick)' if quick else ''}; "
              f"{machine()}\n{versions()}")
    console.print(header)
    if reason:
        report.say(f"PostgreSQL figures skipped: {reason}")
    for skipped in SECTIONS:
        if skipped not in chosen and quick and not sections and skipped in NOT_QUICK:
            report.say(f"section {skipped}: skipped under --quick (run it with "
                       f"--section {skipped})")
    failed = []
    with scratch() as workdir:
        ctx = Context(quick=quick, rounds=rounds or (3 if quick else 5), workdir=workdir,
                      pg_url=None if reason else pg_url, pg_reason=reason or "",
                      report=report)
        for name in chosen:
            module, what = SECTIONS[name]
            console.rule(f"{name}: {what}")
            start = time.perf_counter()
            try:
                importlib.import_module(module).run(ctx)
            except Exception as exc:  # one broken section must not hide the others' figures
                failed.append(name)
                console.print_exception(max_frames=8)
                report.say(f"section {name} FAILED: {type(exc).__name__}: {exc}")
            console.print(f"[dim]{name}: {time.perf_counter() - start:.1f} s[/]")
    if report.verdicts:
        report.print_verdicts()
    if markdown:
        markdown.write_text(report.markdown("\n".join(["```", header, "```"])))
        console.print(f"markdown written to {markdown}")
    if plot:
        from benchmarks.plot import draw

        if draw(report, plot):
            console.print(f"plot written to {plot}")
        else:
            console.print("no scaling section ran: no plot drawn")
    if failed:
        console.print(f"[bold red]sections failed: {', '.join(failed)}[/]")
        sys.exit(1)


if __name__ == "__main__":
    main()
