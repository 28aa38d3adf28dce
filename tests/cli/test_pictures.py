"""The timeline and the diagram, checked by opening the files they write."""

from __future__ import annotations

import itertools
import os
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.cli.conftest import EXP, Run

SVG = "{http://www.w3.org/2000/svg}"
TRIALS = ["a_recovered", "b_preempted_scratch", "c_given_up", "d_paused", "e_stopped",
          "f_aborted"]
STATES = ["NEW", "PENDING", "RUNNING", "PAUSED", "RESTORING", "TERMINATED", "ERROR"]
needs_dot = pytest.mark.skipif(shutil.which("dot") is None,
                               reason="Graphviz's dot is not installed (apt-get install graphviz)")


def _trial_groups(root: ET.Element) -> list[ET.Element]:
    return [g for g in root.iter(f"{SVG}g") if g.get("class") == "trial"]


def test_svg_timeline_has_one_row_per_trial(
    invoke: Callable[..., Run], fixture_db: Path, tmp_path: Path
) -> None:
    out = tmp_path / "timeline.svg"
    assert invoke("--db", fixture_db, "timeline", EXP, "-o", out).exit_code == 0
    root = ET.parse(out).getroot()
    assert root.tag == f"{SVG}svg"
    rows = _trial_groups(root)
    assert [g.get("data-trial-id") for g in rows] == TRIALS
    given_up = rows[TRIALS.index("c_given_up")]
    assert given_up.get("data-status") == "ERROR"
    markers = [p for p in given_up.iter(f"{SVG}path") if p.get("class") == "marker"]
    assert [(m.get("data-kind"), m.get("data-decision")) for m in markers] == [
        ("TrainingError", "RECOVER"), ("RestoreError", "RETRY_RESTORE"),
        ("RestoreError", "RETRY_RESTORE"), ("RestoreError", "GIVE_UP")]
    spans = [r.get("data-status") for r in given_up.iter(f"{SVG}rect")]
    assert spans[-1] == "ERROR" and "RESTORING" in spans
    epochs = [ln for ln in root.iter(f"{SVG}line") if ln.get("class") == "epoch"]
    assert len(epochs) == 1  # the resume after the crash


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.trial_rows: list[str] = []
        self.table_cells: list[str] = []
        self.headers: list[str] = []
        self._in_td = False
        self._in_th = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "g" and values.get("class") == "trial":
            self.trial_rows.append(values.get("data-trial-id") or "")
        self._in_td = tag == "td"
        self._in_th = tag == "th"

    def handle_data(self, data: str) -> None:
        if self._in_td:
            self.table_cells.append(data)
            self._in_td = False
        if self._in_th:
            self.headers.append(data)
            self._in_th = False


def test_html_timeline_has_one_row_per_trial_and_the_table(
    invoke: Callable[..., Run], fixture_db: Path, tmp_path: Path
) -> None:
    out = tmp_path / "timeline.html"
    assert invoke("--db", fixture_db, "timeline", EXP, "-o", out).exit_code == 0
    text = out.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    parser = _Collect()
    parser.feed(text)
    assert parser.trial_rows == TRIALS
    assert "GIVE_UP" in parser.table_cells and "RESTART_FROM_SCRATCH" in parser.table_cells
    # the table's headers are words, not the JSON schema's field names
    assert parser.headers == ["trial", "status", "failures", "restore fails (episode)",
                              "restore fails (total)", "preemptions", "last error",
                              "last decision"]


def test_timeline_scales_to_its_window_and_shades_the_crash(
    invoke: Callable[..., Run], fixture_db: Path, tmp_path: Path
) -> None:
    """(What a browser makes of it: tests/cli/test_browser.py.) The SVG is 100% wide with a
    viewBox, never a fixed pixel width; the stretch between the crashed driver's last event
    and the resumed driver's first is a band labelled "driver down", ending at the epoch line."""
    _shift_epoch_2(fixture_db, 60)
    out = tmp_path / "t.svg"
    assert invoke("--db", fixture_db, "timeline", EXP, "-o", out).exit_code == 0
    root = ET.parse(out).getroot()
    assert root.get("width") == "100%" and root.get("height") is None
    assert root.get("viewBox", "").startswith("0 0 ")
    (down,) = [r for r in root.iter(f"{SVG}rect") if r.get("class") == "driver-down"]
    (label,) = [t for t in root.iter(f"{SVG}text") if t.get("class") == "driver-down-label"]
    (epoch,) = [ln for ln in root.iter(f"{SVG}line") if ln.get("class") == "epoch"]
    assert label.text == "driver down"
    right = float(down.get("x") or 0) + float(down.get("width") or 0)
    assert abs(right - float(epoch.get("x1") or 0)) < 0.2
    assert float(down.get("width") or 0) > 500  # a minute of a run a little longer
    # the order view has no time between two events: the band is still drawn, thin
    assert invoke("--db", fixture_db, "timeline", EXP, "-o", out, "--order").exit_code == 0
    (down,) = [r for r in ET.parse(out).getroot().iter(f"{SVG}rect")
               if r.get("class") == "driver-down"]
    assert float(down.get("width") or 0) >= 6
    # a driver that ended cleanly leaves no band
    other = tmp_path / "o.svg"
    assert invoke("--db", fixture_db, "timeline", "other_exp", "-o", other).exit_code == 0
    assert 'class="driver-down"' not in other.read_text(encoding="utf-8")


def test_png_timeline(invoke: Callable[..., Run], fixture_db: Path, tmp_path: Path) -> None:
    from PIL import Image

    out = tmp_path / "timeline.png"
    assert invoke("--db", fixture_db, "timeline", EXP, "-o", out, "--order").exit_code == 0
    with Image.open(out) as image:
        image.verify()
    with Image.open(out) as image:
        assert image.format == "PNG"
        assert image.text["Description"] == "trials: " + ",".join(TRIALS)
        width, height = image.size
        assert width > 600 and height > 6 * 30
        # One coloured band per trial: at the right end of the plot every trial has ended,
        # so some pixel column crosses six TERMINATED/ERROR bands.
        rgb = image.convert("RGB")
        ended = {(91, 141, 239), (228, 87, 46)}  # STATUS_COLOURS TERMINATED, ERROR
        bands = 0
        for x in range(0, width, 4):
            column = [rgb.getpixel((x, y)) for y in range(height)]
            starts = sum(1 for a, b in itertools.pairwise(column) if b in ended and a not in ended)
            bands = max(bands, starts)
    assert bands >= len(TRIALS)


def test_diagram_dot_is_the_transitions_machine(
    invoke: Callable[..., Run], tmp_path: Path
) -> None:
    out = tmp_path / "machine.dot"
    assert invoke("diagram", "-o", out).exit_code == 0
    source = out.read_text(encoding="utf-8")
    assert source.startswith("digraph trial_state_machine {")
    for state in STATES:
        assert f"\t{state} [" in source
    for guard in ("restore_retry_left", "next_failure_within", "uncounted_preemption",
                  "RESTART_FROM_SCRATCH", "RETRY_RESTORE", "GIVE_UP"):
        assert guard in source


@needs_dot
def test_diagram_svg_and_png_with_graphviz(invoke: Callable[..., Run], tmp_path: Path) -> None:
    from PIL import Image

    svg = tmp_path / "machine.svg"
    assert invoke("diagram", "-o", svg).exit_code == 0
    root = ET.parse(svg).getroot()
    nodes = {
        t.text for g in root.iter(f"{SVG}g") if g.get("class") == "node"
        for t in g.iter(f"{SVG}title")
    }
    assert set(STATES) <= nodes
    png = tmp_path / "machine.png"
    assert invoke("diagram", "-o", png).exit_code == 0
    with Image.open(png) as image:
        image.verify()
    assert not (tmp_path / "machine.dot").exists()


@pytest.mark.parametrize("suffix", ["svg", "png"])
def test_diagram_without_graphviz_writes_dot_and_says_how_to_install(
    invoke: Callable[..., Run], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str
) -> None:
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no `dot` anywhere on PATH
    out = tmp_path / f"machine.{suffix}"
    run = invoke("diagram", "-o", out)
    assert run.exit_code == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "apt-get install graphviz" in lines[0]
    assert str(tmp_path / "machine.dot") in lines[0]
    assert not out.exists()
    assert (tmp_path / "machine.dot").read_text().startswith("digraph")
    assert os.environ["PATH"] == str(empty)


def _shift_epoch_2(db: Path, seconds: int) -> None:
    """Move every event of driver epoch 2 ``seconds`` later: a crash gap before the resume."""
    import sqlite3
    from contextlib import closing
    from datetime import datetime, timedelta

    with closing(sqlite3.connect(db)) as conn, conn:
        for position, recorded in conn.execute(
            "SELECT position, recorded_at FROM events WHERE epoch = 2"
        ).fetchall():
            later = datetime.fromisoformat(recorded) + timedelta(seconds=seconds)
            conn.execute("UPDATE events SET recorded_at = ? WHERE position = ?",
                         (later.isoformat(sep=" "), position))


def _widest_span_share(svg: Path) -> float:
    root = ET.parse(svg).getroot()
    spans = [r for g in _trial_groups(root) for r in g.iter(f"{SVG}rect")
             if r.get("class") == "span"]
    lefts = [float(r.get("x") or 0) for r in spans]
    rights = [float(r.get("x") or 0) + float(r.get("width") or 0) for r in spans]
    plot = max(rights) - min(lefts)
    return max(float(r.get("width") or 0) for r in spans) / plot


def test_timeline_x_axis_is_time_so_a_crash_gap_shows(
    invoke: Callable[..., Run], fixture_db: Path, tmp_path: Path
) -> None:
    """A 60 s gap between the crash and the resume takes most of the time axis; the
    ``--order`` view gives every event one step, so no span is that wide."""
    _shift_epoch_2(fixture_db, 60)
    by_time, by_order = tmp_path / "time.svg", tmp_path / "order.svg"
    assert invoke("--db", fixture_db, "timeline", EXP, "-o", by_time).exit_code == 0
    assert invoke("--db", fixture_db, "timeline", EXP, "-o", by_order, "--order").exit_code == 0
    assert _widest_span_share(by_time) > 0.9  # a trial waiting through the gap
    assert _widest_span_share(by_order) < 0.6
    assert "x axis: time since the first event" in by_time.read_text(encoding="utf-8")
    assert "x axis: event order" in by_order.read_text(encoding="utf-8")
    png = tmp_path / "time.png"
    assert invoke("--db", fixture_db, "timeline", EXP, "-o", png).exit_code == 0


def test_timeline_marks_are_distinct(
    invoke: Callable[..., Run], fixture_db: Path, tmp_path: Path
) -> None:
    """A failure kind is a hollow shape in the legend and a decision a colour swatch, and no
    decision is white: a TrainingError and a RETRY_RESTORE no longer look alike."""
    from statemachine.cli.palette import DECISION_COLOURS

    colours = list(DECISION_COLOURS.values())
    assert len(set(colours)) == len(colours) and "#ffffff" not in colours
    out = tmp_path / "t.svg"
    assert invoke("--db", fixture_db, "timeline", EXP, "-o", out).exit_code == 0
    root = ET.parse(out).getroot()
    kinds = [p for p in root.iter(f"{SVG}path") if p.get("class") == "kind-legend"]
    swatches = [r for r in root.iter(f"{SVG}rect") if r.get("class") == "decision-legend"]
    assert len(kinds) == 4 and {p.get("fill") for p in kinds} == {"none"}
    assert [r.get("fill") for r in swatches] == colours
    markers = {(p.get("data-kind"), p.get("fill")) for p in root.iter(f"{SVG}path")
               if p.get("class") == "marker"}
    assert ("TrainingError", DECISION_COLOURS["RECOVER"]) in markers
    assert ("RestoreError", DECISION_COLOURS["RETRY_RESTORE"]) in markers


def test_timeline_to_an_unwritable_path_is_one_line(
    invoke: Callable[..., Run], fixture_db: Path, tmp_path: Path
) -> None:
    readonly = tmp_path / "ro"
    readonly.mkdir()
    readonly.chmod(0o500)
    try:
        for target in (Path("/proc/t.html"), readonly / "t.svg"):
            run = invoke("--db", fixture_db, "timeline", EXP, "-o", target)
            if os.geteuid() == 0 and target.parent == readonly:
                continue  # root writes anywhere
            assert run.exit_code == 2 and "Traceback" not in run.stderr
            (line,) = run.stderr.strip().splitlines()
            assert line.startswith("trial-replay: error: cannot write the timeline to")
    finally:
        readonly.chmod(0o700)
