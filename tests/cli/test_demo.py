"""``trial-replay demo``: a real Ray Tune run with a driver crash, through the console script.

Its values change every run (Ray trial ids, times), so its golden file holds the shape of its
``--json`` output (every key, and the type of every value) rather than the values.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import GOLDEN
from tests.cli.test_console_script import _run
from tests.cli.test_golden import UPDATE

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def shape(value: Any) -> Any:
    """Keys and value types of a JSON document (lists: the shape of their first item)."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return type(value).__name__


def test_demo_crashes_a_driver_resumes_and_explains(tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    # a relative --dir (Ray's storage path must be absolute: the demo makes it so)
    # Two Ray drivers, one killed: 112 s at load 7 on 2 cores, and over 120 s at load 8.
    done = _run("demo", "--dir", "demo", "--json", cwd=tmp_path, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(done.stdout)
    assert "Driver 1 killed with SIGKILL" in done.stderr
    trials = {t["tag"]: t for t in data["trials"]}
    assert set(trials) == {"restore_flaky", "recovers"}
    flaky = trials["restore_flaky"]
    # The retry spent before the crash stayed spent: 2 retries in all, then it gave up.
    assert (flaky["status"], flaky["num_failures"], flaky["total_restore_failures"]) == (
        "ERROR", 2, 3)
    assert trials["recovers"]["status"] == "TERMINATED"
    explained = data["explain"]
    assert explained["trial_id"] == flaky["trial_id"]
    steps = [(s["epoch"], s["text"]) for s in explained["steps"]]
    texts = " ".join(t for _, t in steps)
    assert "The driver of epoch 1 crashed" in texts
    # each failure names the (one) node it ran on: "Restore failure # 1 on node <ip>
    # (node-id <12 hex>...) (retry 1 of 2)"
    on_node = r"Restore failure # {} on node \S+ \(node-id [0-9a-f]{{12}}\.\.\.\) \({}\)"
    retry1 = next(e for e, t in steps if re.match(on_node.format(1, "retry 1 of 2"), t))
    retry2 = next(e for e, t in steps if re.match(on_node.format(2, "retry 2 of 2"), t))
    assert (retry1, retry2) == (1, 2)
    assert any(re.match(on_node.format(3, "restore retries spent: 2 of 2"), t)
               and "GIVE_UP" in t for _, t in steps)
    # The log the demo wrote reads back through the other commands and verifies.
    folder = Path(data["folder"])
    assert folder.is_absolute() and folder.is_relative_to(workdir)
    assert _run("--db", folder, "verify").returncode == 0
    golden = GOLDEN / "demo_shape.json"
    text = json.dumps(shape(data), indent=2) + "\n"
    if UPDATE:
        golden.write_text(text)
    assert text == golden.read_text()


def test_an_experiment_state_the_kill_tore_is_put_back(tmp_path: Path) -> None:
    # Ray rewrites experiment_state-*.json in place (truncate, then write): a SIGKILL in
    # between leaves it empty and Tuner.restore starts over (seen once in CI). The demo keeps
    # the complete copy it read before the kill and puts it back.
    from statemachine.cli.demo import complete_state, put_back_if_torn

    older = tmp_path / "experiment_state-2026-12-01_10-00-00.json"
    newest = tmp_path / "experiment_state-2026-12-01_11-00-00.json"
    older.write_text('{"trial_data": ["old"]}')
    newest.write_text('{"trial_data": ["a", "b"]}')
    kept = complete_state(tmp_path, tries=1)
    assert kept == (newest, b'{"trial_data": ["a", "b"]}')
    assert not put_back_if_torn(*kept)  # an intact file is left alone
    for torn in ("", '{"trial_data": ["a"'):
        newest.write_text(torn)
        assert complete_state(tmp_path, tries=2) is None  # never a torn copy
        assert put_back_if_torn(*kept)
        assert json.loads(newest.read_text()) == {"trial_data": ["a", "b"]}
    assert complete_state(tmp_path / "none", tries=1) is None
