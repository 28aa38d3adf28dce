"""``python -m benchmarks --quick`` end to end: every section prints its rows, nothing fails.

No timing is asserted (speed is measured by the harness itself, never in a test); this checks
that the harness runs, prints each table beside its baselines, and writes the markdown and the
plot. The peers need the ``bench`` extra: without it their rows must say so.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HAVE_PEERS = all(importlib.util.find_spec(p) is not None for p in ("eventsourcing", "optuna"))


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, Path]:
    """One quick run for the module: (printed output, markdown file, plot file).

    Two rounds per figure, not the quick default of three: every path still runs more than
    once in a rotated order (what the harness's interleaving does) and no timing is asserted,
    so a third round only added time: 111 s against 81 s on the same loaded 2 cores (the
    quick run took 219 s in a CI run with its 240 s timeout).
    """
    out = tmp_path_factory.mktemp("bench")
    markdown, plot = out / "tables.md", out / "scaling.png"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--rounds", "2", "--markdown",
         str(markdown), "--plot", str(plot)],
        cwd=REPO, capture_output=True, text=True, timeout=240,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout, markdown, plot


def test_every_section_prints_its_rows_beside_baselines(quick_run: tuple[str, Path, Path]) -> None:
    printed, _, _ = quick_run
    assert "Traceback" not in printed and "FAILED" not in printed
    for row in (
        "plain dict table, hand-written, same guards (baseline)",
        "compiled from the Machine: fold_compiled (bulk replay)",
        "SQLite: raw insert + commit (sqlite3, WAL, synchronous=FULL) (baseline)",
        "SQLite: ExperimentLog.record (fold + durable append)",
        "SQLite: ExperimentLog.record_many (fold + group commit)",
        "raw read + json + unchecked events + dict-table fold (baseline)",
        "replay_experiment (store read, typed decode, compiled fold)",
        "1,000 trials: ExperimentLog.open",
        "per-trial open cost, 1,000 over 100 trials",
        "raw read: list, read and json-parse the same files (baseline)",
        "trial-replay ingest into a new SQLite log (one transaction)",
        "serve: first load of /e/big",
        "Targets of the issue",
    ):
        assert row in printed, row
    assert "section tune: skipped under --quick" in printed
    assert "section upload: skipped under --quick" in printed


def test_the_upload_section_measures_s3_uploads_and_the_loops_share(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--section", "upload", "--no-postgres"],
        cwd=REPO, capture_output=True, text=True, timeout=240,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    printed = done.stdout
    assert "Traceback" not in printed and "FAILED" not in printed
    if "One upload of the log to S3 (moto server" not in printed:
        assert not os.environ.get("CI"), "CI must have the S3 server (moto[server])"
    for row in ("MB): plain upload of the file (baseline)",
                "consistent copy + upload + move (LogSync)",
                "ExperimentLog.record, no upload running (baseline)",
                "LogSync.request (returns at once; the upload runs in the background)",
                "requests became"):
        assert row in printed, row


def test_peers_run_with_the_bench_extra_or_say_why_not(quick_run: tuple[str, Path, Path]) -> None:
    printed, _, _ = quick_run
    if not HAVE_PEERS:
        assert "the peers come with the bench extra" in printed
        pytest.skip("eventsourcing/optuna not installed (bench extra): peers' rows say so")
    for row in ("eventsourcing: save() per event", "eventsourcing: repository.get per aggregate",
                "Optuna RDBStorage, SQLite", "Optuna JournalStorage"):
        assert row in printed, row


def test_postgres_figures_or_the_reason_they_were_skipped(
    quick_run: tuple[str, Path, Path],
) -> None:
    printed, _, _ = quick_run
    if "PostgreSQL figures skipped" in printed:
        assert not os.environ.get("CI"), "CI must have PostgreSQL"
        return
    for row in ("PostgreSQL: ExperimentLog.record (fold + durable append)",
                "process(es): ExperimentLog.record", "eventsourcing" if HAVE_PEERS else "raw"):
        assert row in printed, row


def test_markdown_and_plot_are_written(quick_run: tuple[str, Path, Path]) -> None:
    _, markdown, plot = quick_run
    text = markdown.read_text()
    assert "| path |" in text and "**Targets of the issue**" in text
    assert "statemachine" in text and "cores" in text  # versions and machine in the header
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10_000
