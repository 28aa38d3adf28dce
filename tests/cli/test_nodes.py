"""Where attempts ran, as the CLI shows it: ``nodes``, the node of each row in ``show`` and
``trials``, the timeline's node band, and nodes kept through ``export``/``import``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tests.cli.conftest import EXP, Run

NODE_A = "a7" * 28


def _json(run: Run) -> object:
    assert run.exit_code == 0, run.stderr
    return json.loads(run.stdout)


def test_nodes_names_the_node_that_ate_the_restores_first(
    invoke: Callable[..., Run], fixture_db: Path
) -> None:
    rows = _json(invoke("--db", fixture_db, "nodes", EXP, "--json"))
    assert isinstance(rows, list)
    worst = rows[0]
    assert (worst["node_id"], worst["node_ip"], worst["hostname"]) == (
        NODE_A, "10.0.0.7", "worker-a")
    assert (worst["restore_failures"], worst["preemptions"], worst["attempts"]) == (4, 1, 5)
    assert worst["trials"] == ["b_preempted_scratch", "c_given_up"]
    # a failure that knew only its IP is not merged into the node with that IP on a guess
    ip_only = [r for r in rows if r["node_id"] is None and r["node_ip"] == "10.0.0.8"]
    assert len(ip_only) == 1 and ip_only[0]["restore_failures"] == 1
    unknown = rows[-1]
    assert (unknown["node_id"], unknown["node_ip"], unknown["hostname"]) == (None, None, None)
    assert sum(r["attempts"] for r in rows) == 17


def test_nodes_table_for_people(invoke: Callable[..., Run], fixture_db: Path) -> None:
    run = invoke("--db", fixture_db, "nodes", EXP)
    assert run.exit_code == 0, run.stderr
    lines = run.stdout.splitlines()
    first = next(i for i, line in enumerate(lines) if "a7a7a7a7a7a7..." in line)
    second = next(i for i, line in enumerate(lines) if "b8b8b8b8b8b8..." in line)
    assert first < second and "10.0.0.7" in lines[first]
    assert "counted under 'unknown'" in run.stderr


def test_nodes_of_an_unknown_experiment_is_one_line(
    invoke: Callable[..., Run], fixture_db: Path
) -> None:
    run = invoke("--db", fixture_db, "nodes", "fixture_ex")
    assert run.exit_code == 2
    assert run.stderr.count("\n") == 1 and "fixture_exp" in run.stderr


def test_show_and_trials_carry_the_node(invoke: Callable[..., Run], fixture_db: Path) -> None:
    shown = _json(invoke("--db", fixture_db, "show", EXP, "c_given_up", "--json"))
    assert isinstance(shown, dict)
    failures = [e for e in shown["events"] if e["event"] == "TrialFailed"]
    assert [f["node"]["node_ip"] for f in failures] == ["10.0.0.8", "10.0.0.7", "10.0.0.7",
                                                        "10.0.0.8"]
    assert failures[-1]["node"] == {"node_id": None, "node_ip": "10.0.0.8", "hostname": None}
    assert all(e["node"] is None for e in shown["events"]
               if e["event"] not in ("TrialFailed", "TrialStarted"))
    trials = {r["trial_id"]: r for r in _json(invoke("--db", fixture_db, "trials", EXP,
                                                     "--json"))}  # type: ignore[union-attr]
    assert trials["b_preempted_scratch"]["last_failure_node"]["node_id"] == NODE_A
    assert trials["a_recovered"]["last_failure_node"] is None  # recorded without a node
    table = invoke("--db", fixture_db, "show", EXP, "c_given_up")
    assert "node" in table.stdout and "10.0.0.7" in table.stdout


def test_export_import_keeps_the_nodes(
    invoke: Callable[..., Run], fixture_db: Path, tmp_path: Path
) -> None:
    exported = tmp_path / "export.jsonl"
    assert invoke("--db", fixture_db, "export", EXP, "-o", exported).exit_code == 0
    copy = tmp_path / "copy.db"
    assert invoke("--db", copy, "import", exported).exit_code == 0
    assert _json(invoke("--db", copy, "nodes", EXP, "--json")) == _json(
        invoke("--db", fixture_db, "nodes", EXP, "--json"))


def test_timeline_bands_and_hover_name_the_node(
    invoke: Callable[..., Run], fixture_db: Path, tmp_path: Path
) -> None:
    page = tmp_path / "t.html"
    assert invoke("--db", fixture_db, "timeline", EXP, "-o", page).exit_code == 0
    text = page.read_text(encoding="utf-8")
    assert 'class="node-band" data-node="node 10.0.0.7 (node-id a7a7a7a7a7a7...)"' in text
    assert "c_given_up: RESTORING on node 10.0.0.7 (node-id a7a7a7a7a7a7...)" in text
    assert "RestoreError RESTORING -&gt; PENDING RETRY_RESTORE on node 10.0.0.7" in text
    assert 'class="node-legend"' in text


def test_what_if_avoid_failed_nodes_counts_retries_on_a_failed_node(
    invoke: Callable[..., Run], fixture_db: Path
) -> None:
    data = _json(invoke("--db", fixture_db, "what-if", EXP, "--avoid-failed-nodes", "--json"))
    assert isinstance(data, dict)
    rows = {r["trial_id"]: r for r in data["trials"]}
    # c_given_up restored twice on 10.0.0.7, b_preempted_scratch went back to it once
    assert rows["c_given_up"]["retries_on_failed_nodes"] == 1
    assert rows["b_preempted_scratch"]["retries_on_failed_nodes"] == 1
    assert "avoid_failed_nodes places it on another node" in rows["c_given_up"]["note"]
    # the episode it gave up in had failed on node A (the last failure knew no node id)
    assert rows["c_given_up"]["hypothetical"]["excluded_nodes"] == [NODE_A]
    assert not any(r["changed"] for r in rows.values())  # placement, never a decision
