"""What ``trial-replay`` loads before it does its work: each command imports what it runs and
nothing else (Ray, Alembic, the web server, pandas...), so every command starts in a fraction
of a second. Run as a user runs it, in a fresh process; the modules are read at its exit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.conftest import EXP

#: The console script's entry point, with the process's modules written to a file at exit.
_PROBE = """
import atexit, json, sys
out = sys.argv.pop(1)
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
sys.argv[0] = "trial-replay"
from statemachine.cli import run
run()
"""

#: Never needed by a read command: Ray (and what it brings), migrations, the web server,
#: plots, graphs, the advice's schema checks.
HEAVY = ("ray", "pandas", "pyarrow", "alembic", "mako", "starlette", "uvicorn", "matplotlib",
         "graphviz", "jsonschema", "psycopg", "transitions.extensions")


def _modules(tmp_path: Path, *args: str | Path) -> set[str]:
    out = tmp_path / "modules.json"
    done = subprocess.run([sys.executable, "-c", _PROBE, str(out), *map(str, args)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return set(json.loads(out.read_text()))


def _loaded(modules: set[str], *tops: str) -> list[str]:
    return sorted(m for m in modules if any(m == t or m.startswith(t + ".") for t in tops))


def test_version_loads_no_command_and_help_nothing_heavy(tmp_path: Path) -> None:
    modules = _modules(tmp_path, "--version")
    assert "click" in modules  # the probe sees what the command loaded
    assert not _loaded(modules, *HEAVY, "sqlalchemy", "rich", "statemachine.log",
                       "statemachine.cli.commands")
    # --help imports every command (it lists their help), none of them anything heavy
    modules = _modules(tmp_path, "--help")
    assert "statemachine.cli.commands.serve" in modules
    assert not _loaded(modules, *HEAVY)


@pytest.mark.parametrize("command", [
    ["experiments"], ["trials", EXP], ["trials", EXP, "--status", "ERROR", "--json"],
    ["show", EXP, "c_given_up"], ["explain", EXP, "c_given_up"], ["nodes", EXP],
])
def test_read_commands_load_neither_ray_nor_alembic(
    tmp_path: Path, fixture_db: Path, command: list[str],
) -> None:
    modules = _modules(tmp_path, "--db", fixture_db, *command)
    assert "sqlalchemy" in modules  # the probe sees what the command loaded
    assert not _loaded(modules, *HEAVY)
    # only the command that runs is imported
    others = {"commands.advise", "commands.serve", "commands.ingest", "commands.drill", "demo"}
    assert not _loaded(modules, *(f"statemachine.cli.{m}" for m in others))
