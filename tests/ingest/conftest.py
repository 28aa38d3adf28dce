"""Fixtures of the ingest tests: copies of the committed Ray experiment folders, and helpers
that read an ingested log back."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from statemachine.ingest.ray_files import parse_error_file

DATA = Path(__file__).resolve().parent.parent / "data" / "ingest"
#: The Ray versions whose folders are committed (tests/data/make_ingest_fixtures.py).
VERSIONS = sorted(p.name for p in DATA.iterdir() if p.is_dir())


def ray_folder(version: str, name: str, target: Path) -> Path:
    """A private copy of a committed Ray experiment folder at ``target``."""
    shutil.copytree(DATA / version / name, target)
    return target


def ray_view(version: str, name: str) -> dict[str, list[Any]]:
    """Ray's own view of a committed run: ``{trial_id: [status, num_failures]}``."""
    return dict(json.loads((DATA / version / f"{name}.ray_view.json").read_text()))


def headers(folder: Path) -> dict[str, int]:
    """How many ``Failure #`` headers each trial's ``error.txt`` holds, by trial id."""
    found: dict[str, int] = {}
    for error in folder.glob("*/error.txt"):
        trial_id = _trial_id(error.parent)
        found[trial_id] = len(parse_error_file(error.read_bytes()))
    return found


def _trial_id(trial_folder: Path) -> str:
    for line in (trial_folder / "result.json").read_text().splitlines():
        return str(json.loads(line)["trial_id"])
    raise AssertionError(f"no result in {trial_folder}")


def tags(folder: Path) -> dict[str, str]:
    """``{case tag: trial id}`` of an experiment folder (from each trial's params.json)."""
    found = {}
    for params in folder.glob("*/params.json"):
        found[json.loads(params.read_text())["case"]["tag"]] = _trial_id(params.parent)
    return found


def run_cli(*args: str | Path) -> tuple[int, str, str]:
    """``trial-replay ARGS`` in this process: exit code, stdout, stderr."""
    from click.testing import CliRunner

    from statemachine.cli import cli

    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def ingest_json(*args: str | Path) -> dict[str, Any]:
    """``trial-replay ingest ARGS --json``, which must succeed: its JSON."""
    code, out, err = run_cli("ingest", *args, "--json")
    assert code == 0, err
    return dict(json.loads(out))


def log_trials(db: Path | str, experiment: str) -> dict[str, list[Any]]:
    """Every trial of ``experiment`` in the log, folded: ``{trial_id: [status, failures]}``."""
    from statemachine.log import EventStore, replay_experiment

    with EventStore.open(db, create=False) as store:
        return {t: [r.state.status.value, r.state.failures]
                for t, r in replay_experiment(store, experiment).items()}


def log_events(db: Path | str, experiment: str) -> list[Any]:
    """Every stored event of ``experiment``, in log order."""
    from statemachine.log import EventStore

    with EventStore.open(db, create=False) as store:
        return list(store.read_experiment(experiment))


@pytest.fixture(autouse=True)
def _no_log_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STATEMACHINE_DB_URL", raising=False)



def assert_agrees_with_ray(folder: Path, db: Path | str, experiment: str,
                           view: dict[str, list[Any]]) -> None:
    """The log holds Ray's view of every trial (status, num_failures), one ``TrialFailed``
    per ``Failure #`` header, every checkpoint folder as a ``CheckpointSaved``; it verifies,
    and ingesting the folder again adds nothing."""
    from collections import Counter

    assert log_trials(db, experiment) == view
    events = log_events(db, experiment)
    failed = Counter(e.trial_id for e in events if e.type_name == "TrialFailed")
    assert dict(failed) == {t: n for t, n in headers(folder).items() if n}
    saved = {e.event.checkpoint for e in events if e.type_name == "CheckpointSaved"}
    assert {str(p) for p in folder.glob("*/checkpoint_*")} <= saved
    code, out, err = run_cli("--db", db, "verify")
    assert code == 0, out + err
    again = ingest_json(folder, "--db", db, "--name", experiment)
    assert again["events_added"] == 0 and again["epoch"] is None
    assert log_events(db, experiment) == events
