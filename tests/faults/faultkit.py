"""Shared by the fault scenarios: count what the log holds against what really happened,
run ``verify`` (the library's and the ``trial-replay verify`` command's), and record the
figures for ``docs/reliability.md``.

Every scenario ends with :func:`check_log`, which asserts: events lost = 0, duplicates = 0,
verify ok; and hands its figures to the ``reliability`` fixture (``conftest.py``), which
writes them to the JSON file named by ``STATEMACHINE_RELIABILITY_REPORT`` when it is set.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from click.testing import CliRunner

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
REPORT_ENV = "STATEMACHINE_RELIABILITY_REPORT"


def under_ci_or_skip(reason: str) -> None:
    """Skip with ``reason``; under ``CI`` a scenario that cannot run is a failure."""
    import pytest

    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set: the fault scenarios must run)")
    pytest.skip(reason)


def fill(folder: Path) -> int:
    """Write a filler file until the filesystem is full; returns its size."""
    chunk = b"\0" * 65536
    size = 0
    with (folder / "filler").open("wb", buffering=0) as out:
        while True:
            try:
                size += out.write(chunk)
            except OSError:
                break
        for step in (4096, 512, 1):
            while True:
                try:
                    size += out.write(b"\0" * step)
                except OSError:
                    break
    return size


def worker_pythonpath() -> str:
    """PYTHONPATH that lets Ray workers and driver processes import the package and tests."""
    parts = [str(REPO), os.environ.get("PYTHONPATH", "")]
    return os.pathsep.join(p for p in parts if p)


@dataclass
class Figures:
    """What one scenario measured on the log it left."""

    scenario: str
    injected: str
    times: int
    events_written: int
    events_lost: int
    duplicates: int
    verify: str
    details: dict[str, Any] = field(default_factory=dict)


def run_cli(*args: str | Path, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """``trial-replay ARGS`` in-process: (exit code, stdout, stderr)."""
    from statemachine.cli import cli

    result = CliRunner().invoke(cli, [str(a) for a in args], env=env, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def cli_verify(url: str, experiment: str) -> dict[str, Any]:
    """``trial-replay --db URL verify --json -- EXP``: exit code, and its JSON."""
    code, out, err = run_cli("--db", url, "verify", "--json", "--", experiment)
    data = json.loads(out) if out.strip() else {}
    return {"exit_code": code, "json": data, "stderr": err}


@dataclass
class LogCount:
    """The rows of one experiment, grouped the ways the scenarios count them."""

    rows: list[Any]

    @property
    def per_trial(self) -> Counter[str]:
        return Counter(row.trial_id for row in self.rows)

    def of_type(self, type_name: str) -> list[Any]:
        return [row for row in self.rows if row.type_name == type_name]

    def of_trial(self, trial_id: str) -> list[Any]:
        """The rows of one trial."""
        return [row for row in self.rows if row.trial_id == trial_id]

    @property
    def repeated_ids(self) -> int:
        """Rows whose (trial, event id) or (trial, seq) another row already has."""
        ids = Counter((r.trial_id, r.event_id) for r in self.rows)
        seqs = Counter((r.trial_id, r.seq) for r in self.rows)
        return sum(n - 1 for n in ids.values()) + sum(n - 1 for n in seqs.values())


def read_log(url: str, experiment: str) -> LogCount:
    """Every stored row of ``experiment``, in position order."""
    from statemachine.log import EventStore

    with EventStore.open(url, create=False) as store:
        return LogCount(list(store.read_experiment(experiment)))


def multiset_diff(expected: Counter[Any], found: Counter[Any]) -> tuple[int, int]:
    """``(lost, duplicated)``: expected items missing from ``found``, and extra ones."""
    lost = sum((expected - found).values())
    extra = sum((found - expected).values())
    return lost, extra


def check_log(
    url: str,
    experiment: str,
    *,
    scenario: str,
    injected: str,
    times: int,
    expected: dict[str, Counter[Any]],
    found: Callable[[LogCount], dict[str, Counter[Any]]],
    shadow: dict[str, Any] | None = None,
    reliability: Callable[[Figures], None] | None = None,
    details: dict[str, Any] | None = None,
) -> Figures:
    """Count lost and duplicated events, run verify both ways, assert all is well, record.

    ``expected``: per kind (e.g. ``"checkpoints"``), the multiset of events that really
    happened (from the trainables' side files); ``found(log)`` gives the same kinds as stored.
    ``shadow``: the driver's own folded states (``{trial_id: TrialState}``): each trial's
    stored rows must be exactly the events it folded (no more, no fewer), and fold to it.
    """
    from statemachine.domain.machine import fold
    from statemachine.log import EventStore, verify

    log = read_log(url, experiment)
    stored = found(log)
    lost = extra = 0
    per_kind: dict[str, dict[str, int]] = {}
    for kind, wanted in expected.items():
        k_lost, k_extra = multiset_diff(wanted, stored.get(kind, Counter()))
        per_kind[kind] = {"expected": sum(wanted.values()), "lost": k_lost, "extra": k_extra}
        lost, extra = lost + k_lost, extra + k_extra
    if shadow is not None:
        counts = log.per_trial
        for trial_id, state in shadow.items():
            lost += max(0, state.seq - counts.get(trial_id, 0))
            extra += max(0, counts.get(trial_id, 0) - state.seq)
        folded = {
            trial_id: fold(trial_id, [r.event for r in log.rows if r.trial_id == trial_id])[0]
            for trial_id in counts
        }
        assert {t: s.to_dict() for t, s in folded.items()} == {
            t: s.to_dict() for t, s in shadow.items()
        }, "the stored log does not fold to the driver's own states"
    duplicates = extra + log.repeated_ids

    with EventStore.open(url, create=False) as store:
        result = verify(store, experiment)
    by_cli = cli_verify(url, experiment)
    verdict = "ok" if result.ok and by_cli["exit_code"] == 0 and by_cli["json"].get("ok") else (
        f"FAILED: {result.divergence.describe() if result.divergence else result.gaps}"
    )
    figures = Figures(
        scenario=scenario, injected=injected, times=times, events_written=len(log.rows),
        events_lost=lost, duplicates=duplicates, verify=verdict,
        details={"per_kind": per_kind, "trials": len(log.per_trial), **(details or {})},
    )
    if reliability is not None:
        reliability(figures)
    assert result.ok, result
    assert by_cli["exit_code"] == 0 and by_cli["json"]["ok"] is True, by_cli
    assert (lost, duplicates) == (0, 0), figures
    return figures


def write_figures(path: Path, figures: Figures) -> None:
    """Merge ``figures`` into the report file (one entry per scenario, newest wins)."""
    data: dict[str, Any] = {"scenarios": {}}
    if path.exists():
        try:
            data = json.loads(path.read_text())
        except ValueError:
            pass
    data.setdefault("scenarios", {})[figures.scenario] = asdict(figures)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


@contextmanager
def captured(logger_name: str = "statemachine") -> Iterator[list[str]]:
    """The messages (WARNING and above) logged under ``logger_name`` while inside."""
    import logging

    messages: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(f"{record.levelname}: {record.getMessage()}")

    logger = logging.getLogger(logger_name)
    handler = Keep(level=logging.WARNING)
    logger.addHandler(handler)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
