"""PostgreSQL for clusters: one database holds the experiments of many drivers, kept apart.

Two driver processes (each its own Ray) run two experiments at the same time with
``EventLogCallback("postgresql+psycopg://...")`` on one database; each trial fails once in
training and recovers. ``trial-replay`` lists both experiments and replays each on its own,
equal to what each driver's Ray reported.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from statemachine.cli import cli
from tests.tune.test_tune_driver_crash import kill_group, start_driver
from tests.tune.tunekit import replay

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.postgres]


def test_two_drivers_two_experiments_one_database(pg_url: str, tmp_path: Path) -> None:
    drivers, outs = [], {}
    for name in ("exp_a", "exp_b"):
        ctl = tmp_path / name / "ctl"
        ctl.mkdir(parents=True)
        outs[name] = tmp_path / name / "result.json"
        args = ["fit", str(tmp_path / name / "results"), name, str(ctl), pg_url,
                str(outs[name])]
        drivers.append(start_driver(args, tmp_path / name / "driver.log"))
    try:
        for proc in drivers:
            proc.wait(timeout=300)
    finally:
        for proc in drivers:
            kill_group(proc)
    results = {}
    for name, out in outs.items():
        assert out.exists(), (tmp_path / name / "driver.log").read_text()[-3000:]
        results[name] = json.loads(out.read_text())
        ((status, failures),) = results[name].values()
        assert (status, failures) == ("TERMINATED", 1)

    runner = CliRunner()
    listed = runner.invoke(cli, ["--db", pg_url, "experiments", "--json"])
    assert listed.exit_code == 0, listed.output
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert sorted(rows) == ["exp_a", "exp_b"]
    for name, row in rows.items():
        assert row["trials"] == 1 and row["status_counts"]["TERMINATED"] == 1
        assert row["storage_path"] == str(tmp_path / name / "results" / name)
        assert [s["end"] for s in row["sessions"]] == ["clean"]

    for name, result in results.items():
        trials = runner.invoke(cli, ["--db", pg_url, "trials", name, "--json"])
        assert trials.exit_code == 0, trials.output
        assert {r["trial_id"]: [r["status"], r["num_failures"]]
                for r in json.loads(trials.stdout)} == result
        states = replay(pg_url, name)
        assert {t: [s.status.value, s.failures] for t, s in states.items()} == result
    assert set(results["exp_a"]).isdisjoint(results["exp_b"])
    verified = runner.invoke(cli, ["--db", pg_url, "verify"])
    assert verified.exit_code == 0, verified.output
