"""Fixtures of the CLI tests: a private copy of the committed fixture log, and runners."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
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


@pytest.fixture
def experiment_dir(tmp_path: Path) -> Path:
    """An experiment folder holding a copy of the fixture log as ``statemachine.db``."""
    folder = tmp_path / "fixture_exp"
    folder.mkdir()
    shutil.copyfile(FIXTURE, folder / "statemachine.db")
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
