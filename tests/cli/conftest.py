"""Fixtures of the CLI tests: a private copy of the committed fixture log, and runners."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from statemachine.cli import cli

HERE = Path(__file__).resolve().parent
FIXTURE = HERE.parent / "data" / "fixture.db"
GOLDEN = HERE / "golden"
EXP = "fixture_exp"


@dataclass
class Run:
    """What one CLI invocation printed and returned."""

    exit_code: int
    stdout: str
    stderr: str


def folder_state(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` with its SHA-256: proves a command wrote nothing."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def copy_fixture(target: Path) -> Path:
    """A private copy of the fixture log whose snapshots are tagged for the running code.

    A snapshot is trusted only by the machine revision that wrote it (its tag), so a new
    revision makes the committed fixture's snapshots untrusted and ``verify`` would check
    none. The copy's tags are set to the running code's revision:
    ``verify`` (and its golden file) still compares every snapshot with the fold, so a fold
    that changed what it computes fails there, and then the fixture is regenerated.
    """
    from statemachine.log.snapshot import machine_version

    shutil.copyfile(FIXTURE, target)
    with closing(sqlite3.connect(target)) as conn, conn:
        conn.execute("UPDATE snapshots SET machine_version = ?", (machine_version(),))
    return target


@pytest.fixture
def experiment_dir(tmp_path: Path) -> Path:
    """An experiment folder holding a copy of the fixture log as ``statemachine.db``."""
    folder = tmp_path / "fixture_exp"
    folder.mkdir()
    copy_fixture(folder / "statemachine.db")
    return folder


@pytest.fixture
def fixture_db(experiment_dir: Path) -> Path:
    """The path of a private copy of the fixture log."""
    return experiment_dir / "statemachine.db"


@pytest.fixture
def invoke(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Run]:
    """Run ``trial-replay ARGS`` in-process through click's CliRunner."""
    monkeypatch.delenv("STATEMACHINE_DB_URL", raising=False)

    def run(*args: str | Path, env: dict[str, str] | None = None) -> Run:
        result = CliRunner().invoke(cli, [str(a) for a in args], env=env, catch_exceptions=False)
        return Run(result.exit_code, result.stdout, result.stderr)

    return run
