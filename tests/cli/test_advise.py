"""``trial-replay advise``: its JSON validates against the documented schema, a seed gives
the same figures, too few failures say so, the plot is written, bad input is one line."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import jsonschema
import pytest

from benchmarks.advise_model import FailureModel, generate, write
from statemachine import EventStore
from statemachine.advise.schema import ADVISE_SCHEMA

Invoke = Callable[..., object]


@pytest.fixture
def log(tmp_path: Path) -> Path:
    """A log of two experiments of a known failure model."""
    path = tmp_path / "advise.db"
    store = EventStore.open(f"sqlite:///{path}")
    try:
        model = FailureModel(trials=40)
        write(store, "first", generate(model, 1), model.policy)
        write(store, "second", generate(model, 2), model.policy)
        few = FailureModel(trials=3, hazard_per_h=0.3, preempt_per_h=0.0, deterministic=0)
        write(store, "calm", generate(few, 4), few.policy)
    finally:
        store.close()
    return path


def test_json_validates_and_a_seed_repeats(invoke: Invoke, log: Path) -> None:
    first = invoke("--db", log, "advise", "first", "second", "--json", "--seed", "3",
                   "--restore-retries", "0..2", "--max-failures", "1,2")
    assert first.exit_code == 0, first.stderr  # type: ignore[attr-defined]
    data = json.loads(first.stdout)  # type: ignore[attr-defined]
    jsonschema.Draft202012Validator(ADVISE_SCHEMA).validate(data)
    assert data["experiments"] == ["first", "second"]
    assert len(data["sweep"]) == 6
    assert data["recommendation"]["verdict"] == "recommend"
    assert data["recommendation"]["code"][0].startswith("RetryPolicy(")
    assert data["estimates"]["deterministic"][0]["trial_id"] == "t00000"
    again = invoke("--db", log, "advise", "first", "second", "--json", "--seed", "3",
                   "--restore-retries", "0..2", "--max-failures", "1,2")
    assert again.stdout == first.stdout  # type: ignore[attr-defined]


def test_every_experiment_by_default_and_the_human_view(invoke: Invoke, log: Path,
                                                       tmp_path: Path) -> None:
    page, picture = tmp_path / "front.html", tmp_path / "front.png"
    run = invoke("--db", log, "advise", "--max-failures", "1,2", "-o", page)
    assert run.exit_code == 0, run.stderr  # type: ignore[attr-defined]
    text = run.stdout  # type: ignore[attr-defined]
    assert "Advice for calm, first, second" in text
    assert "restore attempt succeeds" in text and "Recommendation:" in text
    assert "FailureConfig(max_failures=" in text and "TUNE_RESTORE_RETRY_NUM=" in text
    assert "<svg" in page.read_text() and "RetryPolicy(" in page.read_text()
    run = invoke("--db", log, "advise", "first", "--max-failures", "1", "-o", picture)
    assert run.exit_code == 0 and picture.read_bytes()[:4] == b"\x89PNG"  # type: ignore[attr-defined]


def test_too_few_failures_is_not_enough_evidence(invoke: Invoke, log: Path) -> None:
    run = invoke("--db", log, "advise", "calm", "--json")
    data = json.loads(run.stdout)  # type: ignore[attr-defined]
    jsonschema.Draft202012Validator(ADVISE_SCHEMA).validate(data)
    assert data["estimates"]["failures"] < 5
    assert data["recommendation"]["verdict"] == "not_enough_evidence"
    assert data["recommendation"]["code"] == []
    human = invoke("--db", log, "advise", "calm")
    assert "not enough evidence: only" in human.stdout  # type: ignore[attr-defined]


@pytest.mark.parametrize(("args", "says"), [
    (("-o", "x.txt"), "advise -o must end in .html or .png"),
    (("--restore-retries", "3..1"), "'--restore-retries'"),
    (("--max-failures", "a"), "'--max-failures'"),
    (("--restore-phase", "sometimes"), "'sometimes' is not one of"),
    (("nope",), "no experiment named 'nope'"),
])
def test_bad_input_is_one_line(invoke: Invoke, log: Path, args: tuple[str, ...],
                               says: str) -> None:
    run = invoke("--db", log, "advise", *args)
    assert run.exit_code == 2  # type: ignore[attr-defined]
    err = run.stderr.strip()  # type: ignore[attr-defined]
    assert says in err and len(err.splitlines()) == 1, err
