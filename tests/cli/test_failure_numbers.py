"""One numbering of failures: ``error.txt``, ``explain`` (text and ``--json``), ``show`` (text
and ``--json``) and the web page give every failure of a random history the same numbers.

A failure's numbers are the counters its rule incremented (``TransitionRecord.numbers``):
``Restore failure # N`` the trial's restore failures so far, ``retry k of R`` this restore's,
``failure n`` Ray's ``num_failures``, ``Preemption # p`` the uncounted preemptions. The history
is recorded through a real ``ExperimentLog`` (the live path); its error file is written the way
Ray writes one and rewritten by the seam's ``rewrite_last_header``; the commands run in-process
and the web page is fetched from a real ``trial-replay serve``.
"""

from __future__ import annotations

import html
import itertools
import json
import queue
import re
import subprocess
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statemachine.cli import cli
from statemachine.domain.compiled import apply_compiled
from statemachine.domain.death import ActorDeath, DeathCause
from statemachine.domain.events import (
    CheckpointSaved,
    Event,
    FirstResult,
    PolicySet,
    RestoreSucceeded,
    TrialAdded,
    TrialFailed,
    TrialReset,
    TrialResumed,
    TrialStarted,
)
from statemachine.domain.failures import ActorError
from statemachine.domain.machine import TransitionRecord
from statemachine.domain.nodes import NodeRef
from statemachine.domain.policy import RetryPolicy
from statemachine.domain.state import TrialState
from statemachine.domain.status import Status
from statemachine.exceptions import InvalidTransitionError
from statemachine.log import ExperimentLog
from statemachine.tune.errorfile import rewrite_last_header
from tests.cli.test_console_script import _lines, _script
from tests.domain.domain_strategies import EVENT_STRATEGIES, event_step, names, policies

_PATTERNS = {
    "restore_failure": re.compile(r"[Rr]estore failure # (\d+)"),
    "retry": re.compile(r"\bretry (\d+) of \d+"),
    "failure": re.compile(r"(?:\bfailure|\bFailure #) (\d+) (?:of max_failures|exceeds "
                          r"max_failures|\(max_failures unlimited\)|\(occurred at)"),
    "preemption": re.compile(r"Preemption # (\d+)"),
    "cause_retry": re.compile(r"Uncounted [a-z_]+ # (\d+)"),
}


def numbers_in(text: str) -> dict[str, int]:
    """The numbers a text gives a failure, by name (each at most once)."""
    found: dict[str, int] = {}
    for name, pattern in _PATTERNS.items():
        values = {int(v) for v in pattern.findall(text)}
        assert len(values) <= 1, (name, text)
        if values:
            found[name] = values.pop()
    return found


def expected(record: TransitionRecord) -> dict[str, int]:
    return {name: value for name, value in record.numbers()._asdict().items()
            if value is not None}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """A log and a ``trial-replay serve`` of it; yields (db, base URL)."""
    db = tmp_path_factory.mktemp("numbers") / "numbers.db"
    with ExperimentLog.open(db, "seed", RetryPolicy()) as log:
        log.record("t", TrialAdded())
    proc = subprocess.Popen([_script(), "--db", str(db), "serve", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_lines, args=(proc.stdout, lines), daemon=True).start()
    try:
        first = lines.get(timeout=60)
        assert first.startswith("Serving http://127.0.0.1:"), first
        yield db, first.split()[1].split("/e/", 1)[0].rstrip("/")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _plain(event: Event) -> Event:
    """A failure with a plain message and node (the wording is compared, not escaping)."""
    if not isinstance(event, TrialFailed):
        return event
    error = event.error
    fields: dict[str, Any] = {}
    if isinstance(error, ActorError):  # its cause kept, Ray's words plain
        fields["death"] = ActorDeath(error.cause, "NODE_DIED/UNEXPECTED_TERMINATION"
                                     if error.cause is DeathCause.NODE_DIED else "", "gone")
    node = event.node and NodeRef(event.node.node_id, event.node.node_ip, "host-1")
    return TrialFailed(type(error)(error.cause_type, "it broke", "Traceback", **fields), node,
                       event.iteration)


#: What a trial does next from each status, weighted towards failures and restores (the
#: rest of the time: any event the status accepts, drawn by the domain strategies).
_NEXT: dict[Status, list[tuple[int, Any]]] = {
    Status.NEW: [(100, lambda d: TrialAdded())],
    Status.PENDING: [(60, lambda d: TrialStarted(restore_from=d.draw(st.none() | names))),
                     (20, lambda d: TrialStarted())],
    Status.RESTORING: [(50, lambda d: d.draw(EVENT_STRATEGIES[TrialFailed])),
                       (35, lambda d: RestoreSucceeded())],
    Status.RUNNING: [(40, lambda d: d.draw(EVENT_STRATEGIES[TrialFailed])),
                     (20, lambda d: CheckpointSaved(d.draw(names))),
                     (10, lambda d: FirstResult(iteration=1))],
    Status.PAUSED: [(40, lambda d: TrialResumed())],
    Status.TERMINATED: [(40, lambda d: TrialReset(from_scratch=d.draw(st.booleans())))],
    Status.ERROR: [(50, lambda d: TrialReset(from_scratch=d.draw(st.booleans())))],
}


def _next_event(data: st.DataObject, status: Status) -> Event:
    roll = data.draw(st.integers(0, 99), label="roll")
    for weight, make in _NEXT[status]:
        if roll < weight:
            return _plain(make(data))
        roll -= weight
    return _plain(event_step(data, status))


@st.composite
def histories(draw: st.DrawFn) -> tuple[RetryPolicy, list[Event]]:
    """A session policy and a valid history of one trial (the policy is the session's)."""
    policy, data = draw(policies), draw(st.data())
    state = TrialState("t", policy=policy)
    events: list[Event] = []
    for _ in range(draw(st.integers(1, 60))):
        event = _next_event(data, state.status)
        if isinstance(event, PolicySet):
            continue
        try:
            apply_compiled(state, event)
        except InvalidTransitionError:
            continue
        events.append(event)
    return policy, events


def _cli(db: Path, *args: str) -> str:
    result = CliRunner().invoke(cli, ["--db", str(db), *args], env={"COLUMNS": "4000"},
                                catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    return result.stdout


def _error_file(path: Path, records: list[TransitionRecord], policy: RetryPolicy) -> list[str]:
    """The trial's error.txt as Ray appends it and the seam rewrites each new header."""
    for ray_count, record in enumerate(records, 1):
        with path.open("a") as out:
            out.write(f"Failure # {ray_count} (occurred at 2026-12-02_10-00-{ray_count:02d})\n"
                      "Traceback: it broke\n")
        assert rewrite_last_header(path, record, policy)
    return path.read_text().splitlines()[::2] if records else []


_count = itertools.count()


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(histories())
def test_every_failure_has_the_same_numbers_everywhere(
    served: tuple[Path, str], tmp_path: Path, history: tuple[RetryPolicy, list[Event]]
) -> None:
    db, base = served
    policy, events = history
    exp = f"n{next(_count)}"
    with ExperimentLog.open(db, exp, policy, sqlite_synchronous="OFF") as log:
        records = [r for r in log.record_many(("t", e) for e in events) if r.error is not None]
    wanted = [expected(r) for r in records]
    assert all(w for w in wanted)  # every failure counts something

    headers = _error_file(tmp_path / f"{exp}-error.txt", records, policy)
    explained = json.loads(_cli(db, "explain", exp, "t", "--json"))["steps"]
    failure_steps = [s["text"] for s in explained if s["event"] == "TrialFailed"]
    shown = [r for r in json.loads(_cli(db, "show", exp, "t", "--json"))["events"]
             if r["event"] == "TrialFailed"]
    human_explain = _cli(db, "explain", exp, "t")
    human_show = [line for line in _cli(db, "show", exp, "t", "--wide").splitlines()
                  if "TrialFailed" in line]
    with urllib.request.urlopen(f"{base}/e/{exp}/t/t", timeout=30) as response:
        page = response.read().decode("utf-8")

    assert len(headers) == len(failure_steps) == len(shown) == len(human_show) == len(wanted)
    for want, record, header, text, row, line in zip(
            wanted, records, headers, failure_steps, shown, human_show, strict=True):
        assert numbers_in(header) == want, header
        assert numbers_in(text) == want, text
        assert text in human_explain
        assert html.escape(text, quote=True) in page
        counters = record.counters._asdict()
        assert row["counters"] == counters and row["decision"] == record.decision.value  # type: ignore[union-attr]
        cells = re.split(r"\s{2,}", line.strip())
        at = cells.index("TrialFailed")
        assert cells[at + 4:at + 7] == [str(counters["failures"]),
                               f"{counters['restore_failures']}/"
                               f"{counters['total_restore_failures']}",
                               str(counters["preemptions"])], line
        # each number is the counter show gives it
        for name, column in (("restore_failure", "total_restore_failures"),
                             ("retry", "restore_failures"), ("failure", "failures"),
                             ("preemption", "preemptions")):
            if name in want:
                assert want[name] == counters[column]

