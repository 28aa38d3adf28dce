"""``--json`` output of every command, compared with the committed golden files.

The golden files are the documented schema in action (docs/cli.md). They are read from the
committed fixture log, so they hold its times and event ids as they are. After changing the
fixture or the schema on purpose, regenerate them and review the diff::

    UPDATE_GOLDEN=1 python -m pytest tests/cli/test_golden.py
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.conftest import EXP, GOLDEN, Run

UPDATE = bool(os.environ.get("UPDATE_GOLDEN"))
#: The ``restore`` trial of the committed faults run (its load_checkpoint fails three times).
RESTORE_TRIAL = "f87df_00002"

#: name -> arguments after ``--db DB`` ({tmp} is the test's temporary folder; {ray:NAME} a
#: copy there of the committed Ray folder tests/data/ingest/<newest Ray>/NAME, run without the
#: callback; {ingested:NAME} a log made by ingesting that copy).
CASES: dict[str, list[str]] = {
    "experiments": ["experiments", "--json"],
    "trials": ["trials", EXP, "--json"],
    "trials_at_crash": ["trials", EXP, "--at", "33", "--json"],
    "trials_status_error": ["trials", EXP, "--status", "ERROR", "--json"],
    "show": ["show", EXP, "c_given_up", "--json"],
    "explain_given_up": ["explain", EXP, "c_given_up", "--json"],
    "explain_restart_from_scratch": ["explain", EXP, "b_preempted_scratch", "--json"],
    "what_if_restore_retry_num": ["what-if", EXP, "--restore-retry-num", "3", "--json"],
    "what_if_max_failures": ["what-if", EXP, "--max-failures", "0", "--json"],
    "what_if_avoid_failed_nodes": ["what-if", EXP, "--avoid-failed-nodes", "--json"],
    "nodes": ["nodes", EXP, "--json"],
    "verify": ["verify", "--json"],
    "export.jsonl": ["export", EXP, "--json"],
    "export_to_file": ["export", EXP, "-o", "{tmp}/export.jsonl", "--json"],
    "timeline": ["timeline", EXP, "-o", "{tmp}/timeline.html", "--json"],
    "diagram": ["diagram", "-o", "{tmp}/machine.dot", "--json"],
    "tail.jsonl": ["tail", EXP, "-n", "5", "--json"],
    "db_current": ["db", "current", "--json"],
    "db_upgrade": ["db", "upgrade", "--json"],
    "ingest": ["ingest", "{ray:faults}", "--db", "{tmp}/ingested.db", "--json"],
    "ingest_explain_restore": ["explain", "faults", RESTORE_TRIAL, "--db", "{ingested:faults}",
                               "--json"],
    "ingest_show_restore": ["show", "faults", RESTORE_TRIAL, "--db", "{ingested:faults}",
                            "--json"],
}


def _placed(arg: str, tmp: Path, invoke: Callable[..., Run]) -> str:
    """An argument of CASES with its placeholders made real in ``tmp``."""
    from tests.ingest.conftest import VERSIONS, ray_folder

    kind, _, name = arg.strip("{}").partition(":")
    if not (arg.startswith("{") and kind in ("ray", "ingested")):
        return arg.replace("{tmp}", str(tmp))
    folder = tmp / name
    if not folder.exists():
        ray_folder(VERSIONS[-1], name, folder)
    if kind == "ray":
        return str(folder)
    db = tmp / f"{name}.db"
    if not db.exists():
        assert invoke("ingest", folder, "--db", db).exit_code == 0
    return str(db)


def _normalise(text: str, tmp: Path) -> str:
    return text.replace(str(tmp), "{tmp}")


def _check(name: str, text: str) -> None:
    path = GOLDEN / (name if "." in name else f"{name}.json")
    if UPDATE:
        path.write_text(text, encoding="utf-8")
    assert path.is_file(), f"no golden file {path}; run with UPDATE_GOLDEN=1 to write it"
    assert text == path.read_text(encoding="utf-8"), f"{name}: output differs from {path}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_json_output_matches_golden(
    name: str, invoke: Callable[..., Run], fixture_db: Path, tmp_path: Path
) -> None:
    args = [_placed(a, tmp_path, invoke) for a in CASES[name]]
    run = invoke("--db", fixture_db, *args)
    assert run.exit_code == 0, run.stderr
    assert run.stderr == ""
    if name.endswith(".jsonl"):
        for line in run.stdout.splitlines():
            json.loads(line)
    else:
        json.loads(run.stdout)
    _check(name, _normalise(run.stdout, tmp_path))


def test_import_json_matches_golden(
    invoke: Callable[..., Run], fixture_db: Path, tmp_path: Path
) -> None:
    exported = tmp_path / "export.jsonl"
    assert invoke("--db", fixture_db, "export", EXP, "-o", exported).exit_code == 0
    run = invoke("--db", tmp_path / "copy.db", "import", exported, "--json")
    assert run.exit_code == 0, run.stderr
    _check("import", _normalise(run.stdout, tmp_path))
