"""A big experiment's timeline draws a bounded number of trials (``--trials``): the ones that
failed first, then the others in order of first appearance, and says what it left out; a
small one draws every trial as before. Real SQLite logs written with the public API."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path

import pytest

from statemachine.domain.events import Event, TrialAdded, TrialCompleted, TrialFailed, TrialStarted
from statemachine.domain.failures import TrainingError
from tests.cli.conftest import EXP, Run
from tests.cli.web_logs import POLICY

SVG = "{http://www.w3.org/2000/svg}"
EXPERIMENT = "bounded"
#: t0 .. t5 start in this order; t4 fails first, then t1, then t4 again; the others end.
TRIALS = [f"t{n}" for n in range(6)]


def _fail() -> TrialFailed:
    return TrialFailed(TrainingError("builtins.ValueError", "loss is NaN"))


@pytest.fixture
def bounded_db(tmp_path: Path) -> Path:
    from statemachine.log import ExperimentLog

    db = tmp_path / "statemachine.db"
    items: list[tuple[str, Event]] = []
    for trial in TRIALS:
        items += [(trial, TrialAdded({})), (trial, TrialStarted())]
    items += [("t4", _fail()), ("t4", TrialStarted()), ("t1", _fail()), ("t4", _fail())]
    items += [(t, TrialCompleted()) for t in ("t0", "t2", "t3", "t5")]
    log = ExperimentLog.open(str(db), EXPERIMENT, POLICY)
    try:
        log.record_many(items)
    finally:
        log.close()
    return db


def _svg_rows(path: Path) -> list[str]:
    root = ET.parse(path).getroot()
    return [g.get("data-trial-id", "") for g in root.iter(f"{SVG}g")
            if g.get("class") == "trial"]


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.rows: list[str] = []
        self.table: list[str] = []
        self.overview: list[str] = []
        self.note = ""
        self._in: str | None = None
        self._first_cell = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "g" and a.get("class") == "trial":
            self.rows.append(a.get("data-trial-id") or "")
        if tag == "rect" and a.get("class") == "overview-part":
            self.overview.append(a.get("data-status") or "")
        if tag == "p" and a.get("id") == "timeline-note":
            self._in = "note"
        if tag == "tr":
            self._first_cell = True
        if tag == "td" and self._first_cell:
            self._in, self._first_cell = "cell", False

    def handle_endtag(self, tag: str) -> None:
        if tag in ("p", "td"):
            self._in = None

    def handle_data(self, data: str) -> None:
        if self._in == "note":
            self.note += data
        elif self._in == "cell":
            self.table.append(data)


def test_a_big_experiment_draws_the_failed_first_and_says_what_it_left_out(
    invoke: Callable[..., Run], bounded_db: Path, tmp_path: Path
) -> None:
    out = tmp_path / "t.svg"
    run = invoke("--db", bounded_db, "timeline", EXPERIMENT, "-o", out, "--trials", "3")
    assert run.exit_code == 0, run.stdout
    # t4 failed first, then t1; the third row is the first of the others to appear
    assert _svg_rows(out) == ["t4", "t1", "t0"]
    note = ("drawn 3 of 6 trials: the 2 that failed first, then 1 other in order of first "
            "appearance; 3 left out (--trials 0 draws all)")
    assert note in " ".join(run.stdout.split())  # the console wraps long lines
    assert note in out.read_text(encoding="utf-8")

    page = tmp_path / "t.html"
    run = invoke("--db", bounded_db, "timeline", EXPERIMENT, "-o", page, "--trials", "3",
                 "--json")
    found = json.loads(run.stdout)
    assert found["trials"] == ["t4", "t1", "t0"]
    assert (found["trials_total"], found["left_out"], found["failed_drawn"]) == (6, 3, 2)
    assert found["note"] == note
    parsed = _Page()
    parsed.feed(page.read_text(encoding="utf-8"))
    assert parsed.rows == ["t4", "t1", "t0"]
    assert parsed.table == ["t4", "t1", "t0"]  # the table lists the drawn trials
    assert note in parsed.note and "all 6 trials by status" in parsed.note
    # the bar counts every trial: t1 waits for its retry, t4 gave up, the others ended
    assert sorted(parsed.overview) == ["ERROR", "PENDING", "TERMINATED"]


def test_fewer_failed_than_the_bound_and_none_failed(
    invoke: Callable[..., Run], bounded_db: Path, tmp_path: Path
) -> None:
    out = tmp_path / "t.svg"
    run = invoke("--db", bounded_db, "timeline", EXPERIMENT, "-o", out, "--trials", "1",
                 "--json")
    assert json.loads(run.stdout)["trials"] == ["t4"]
    assert _svg_rows(out) == ["t4"]
    run = invoke("--db", bounded_db, "timeline", EXPERIMENT, "-o", out, "--trials", "5")
    assert _svg_rows(out) == ["t4", "t1", "t0", "t2", "t3"]
    said = " ".join(run.stdout.split())
    assert "drawn 5 of 6 trials" in said and "1 left out" in said


@pytest.mark.parametrize("bound", ["6", "300", "0"])
def test_an_experiment_within_the_bound_draws_every_trial_as_before(
    invoke: Callable[..., Run], bounded_db: Path, tmp_path: Path, bound: str
) -> None:
    out = tmp_path / "t.html"
    run = invoke("--db", bounded_db, "timeline", EXPERIMENT, "-o", out, "--trials", bound,
                 "--json")
    found = json.loads(run.stdout)
    assert found["trials"] == TRIALS  # in order of first appearance, nothing left out
    assert set(found) == {"file", "format", "experiment", "trials", "events"}
    parsed = _Page()
    parsed.feed(out.read_text(encoding="utf-8"))
    assert parsed.rows == TRIALS and parsed.table == TRIALS
    assert parsed.note == "" and parsed.overview == []


def test_the_default_bound_leaves_a_small_experiment_whole(
    invoke: Callable[..., Run], fixture_db: Path, tmp_path: Path
) -> None:
    out = tmp_path / "t.svg"
    whole = tmp_path / "whole.svg"
    assert invoke("--db", fixture_db, "timeline", EXP, "-o", out).exit_code == 0
    assert invoke("--db", fixture_db, "timeline", EXP, "-o", whole, "--trials", "0"
                  ).exit_code == 0
    assert out.read_bytes() == whole.read_bytes()


def test_a_negative_bound_is_one_line(
    invoke: Callable[..., Run], bounded_db: Path, tmp_path: Path
) -> None:
    run = invoke("--db", bounded_db, "timeline", EXPERIMENT, "-o", tmp_path / "t.svg",
                 "--trials", "-1")
    assert run.exit_code != 0
    assert "--trials" in run.stderr


def test_a_drawn_trial_sits_where_the_whole_picture_puts_it(
    invoke: Callable[..., Run], bounded_db: Path, tmp_path: Path
) -> None:
    def places(path: Path, trial: str) -> list[tuple[str | None, ...]]:
        root = ET.parse(path).getroot()
        group = next(g for g in root.iter(f"{SVG}g") if g.get("data-trial-id") == trial)
        return [(el.get("data-t0"), el.get("data-t1"), el.get("data-t"))
                for el in group.iter() if el.get("class") in ("span", "marker")]

    whole, bounded = tmp_path / "whole.svg", tmp_path / "bounded.svg"
    for order in ([], ["--order"]):
        assert invoke("--db", bounded_db, "timeline", EXPERIMENT, "-o", whole, "--trials", "0",
                      *order).exit_code == 0
        assert invoke("--db", bounded_db, "timeline", EXPERIMENT, "-o", bounded, "--trials",
                      "2", *order).exit_code == 0
        for trial in ("t4", "t1"):
            assert places(bounded, trial) == places(whole, trial) != []
        end = ET.parse(whole).getroot().get("data-x-end")
        assert ET.parse(bounded).getroot().get("data-x-end") == end  # the axis is the same
