"""Export and ``EventStore.import_experiment``: a verbatim copy between stores, all or nothing.

The command line (``trial-replay export`` / ``import``) is a thin caller of these; its golden
files and bad-input tests are in tests/cli.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from statemachine import (
    CheckpointSaved,
    RetryPolicy,
    TrainingError,
    TrialAdded,
    TrialFailed,
    TrialStarted,
)
from statemachine.exceptions import ExperimentExistsError, ExportFormatError
from statemachine.log import EventStore, ExperimentLog, export_records, read_export, verify
from statemachine.log.records import dump_json


def _record(url: str) -> None:
    with ExperimentLog.open(url, "exp", RetryPolicy(max_failures=2)) as log:
        log.record("t1", TrialAdded(config={"lr": 0.1, "name": "caf\u00e9 \udcff"}))
        log.record("t1", TrialStarted())
        log.record("t1", CheckpointSaved("ckpt_1"))
        log.record("t1", TrialFailed(error=TrainingError("builtins.ValueError", "nan")))
        log.record("t2", TrialAdded())


def _export(url: str, path: Path) -> list[str]:
    with EventStore.open(url, create=False) as store:
        lines = [dump_json(r) for r in export_records(store, "exp", print)]
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return lines


def test_export_import_export_is_identical(tmp_path: Path) -> None:
    source, target = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    _record(source)
    first = _export(source, tmp_path / "a.jsonl")
    with EventStore.open(target) as store:
        assert store.import_experiment(read_export(tmp_path / "a.jsonl")) == "exp"
        assert verify(store, "exp").ok
        with pytest.raises(ExperimentExistsError, match="'exp' already exists"):
            store.import_experiment(read_export(tmp_path / "a.jsonl"))
        assert store.import_experiment(read_export(tmp_path / "a.jsonl"), name="copy") == "copy"
        assert [e.event_id for e in store.read_experiment("copy")] == [
            e.event_id for e in store.read_experiment("exp")
        ]
    assert _export(target, tmp_path / "b.jsonl") == first


def test_a_cut_export_file_is_refused_naming_its_line(tmp_path: Path) -> None:
    source = f"sqlite:///{tmp_path / 'a.db'}"
    _record(source)
    lines = _export(source, tmp_path / "a.jsonl")
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join([*lines[:-1], lines[-1][:-5]]) + "\n", encoding="utf-8")
    with pytest.raises(ExportFormatError, match=f"broken.jsonl line {len(lines)}"):
        read_export(broken)


def test_the_export_schema_in_the_docs_is_the_one_import_checks() -> None:
    import re

    from statemachine.log.export_format import EXPORT_SCHEMA

    doc = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- export-schema:start -->\n```json\n(.*?)```", doc, re.S)
    assert block is not None and json.loads(block.group(1)) == EXPORT_SCHEMA


def test_the_hand_validator_agrees_with_jsonschema(tmp_path: Path) -> None:
    """Where ``jsonschema`` is installed (Ray brings it), it accepts a real export and refuses
    what :func:`schema_error` refuses (the schema is standard, bar the ``x-`` keywords)."""
    jsonschema = pytest.importorskip("jsonschema")
    from statemachine.log.export_format import EXPORT_SCHEMA, schema_error

    source = f"sqlite:///{tmp_path / 'a.db'}"
    _record(source)
    lines = [json.loads(x) for x in _export(source, tmp_path / "a.jsonl")]
    validator = jsonschema.Draft202012Validator(EXPORT_SCHEMA)
    for line in lines:
        assert schema_error(line, EXPORT_SCHEMA) is None
        validator.validate(line)
    event = next(x for x in lines if x["kind"] == "event")
    for bad in ({**event, "seq": "1"}, {**event, "version": 2**70}, {**event, "colour": 1},
                {k: v for k, v in event.items() if k != "event_id"},
                {**event, "status_after": "DONE"}, {**lines[0], "epoch": 0}):
        assert schema_error(bad, EXPORT_SCHEMA) is not None
        assert not validator.is_valid(bad)
