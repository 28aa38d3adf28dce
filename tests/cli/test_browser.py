"""The timeline and the pages in a real headless Chromium (issue 29, items 2 and 3): what a
person sees in a 1280 px window.

The log is the newcomer's experiment of the issue: 6 trials of 20 iterations, a driver killed
halfway (its session ended unclean) and resumed a minute later, one trial giving up. Its
events are spread 1.5 s apart (the store stamps them as they are written; the test moves the
stamps, as a real run would have spaced them). Each test saves a screenshot in its tmp_path
(printed); ``UPDATE_SCREENSHOT=1`` also writes the serve page to docs/serve.png (the
README's picture) and the HTML timeline to docs/timeline.png.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from contextlib import closing
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from statemachine.domain.events import (
    CheckpointSaved,
    RestoreSucceeded,
    TrialAdded,
    TrialCompleted,
    TrialFailed,
    TrialResumed,
    TrialStarted,
)
from statemachine.domain.failures import AbortError, RestoreError, TrainingError
from statemachine.domain.nodes import NodeRef
from statemachine.domain.policy import RetryPolicy
from tests.browser_support import Watched, save_screenshot
from tests.cli.conftest import Run
from tests.cli.test_serve import serving

ROOT = Path(__file__).resolve().parents[2]
#: The README's and docs/cli.md's pictures, rewritten by UPDATE_SCREENSHOT=1.
SCREENSHOT = ROOT / "docs" / "serve.png"
TIMELINE_SCREENSHOT = ROOT / "docs" / "timeline.png"
EXPERIMENT = "train_fn_2026-12-01_10-00-00"
HOSTILE = ["<img src=x onerror=alert(1)>", "</script><script>alert(2)</script>"]
NODE = NodeRef("e5" * 28, "10.0.0.5", "workstation")
#: Seconds between two events, and the time the driver stayed down.
EVENT_GAP_S, DOWN_S = 1.5, 60


def _trials(hostile: bool) -> list[str]:
    ids = [f"60c24_0000{i}" for i in range(6)]
    return ids[:4] + HOSTILE if hostile else ids


def write_newcomer_log(folder: Path, hostile: bool = False) -> Path:
    """The newcomer's experiment (see the module's docstring) in ``folder/statemachine.db``."""
    from statemachine.log import ExperimentLog

    db = folder / "statemachine.db"
    trials = _trials(hostile)
    flaky, aborted = trials[2], trials[5]
    log = ExperimentLog.open(str(db), EXPERIMENT, RetryPolicy(max_failures=3,
                                                              restore_retry_num=2))
    try:
        for trial in trials:
            log.record(trial, TrialAdded({"lr": 0.01}))
            log.record(trial, TrialStarted(node=NODE))
        for step in range(1, 11):
            for trial in trials:
                log.record(trial, CheckpointSaved(f"{trial}/checkpoint_{step:06d}"))
            if step == 5:
                log.record(trials[1], TrialFailed(TrainingError("builtins.ValueError",
                                                                "loss is NaN"), node=NODE))
                log.record(trials[1], TrialStarted(node=NODE))
                log.record(trials[1], RestoreSucceeded())
    finally:
        log.close(clean=False)  # SIGKILL: the session never ended cleanly
    log = ExperimentLog.open(str(db), EXPERIMENT, RetryPolicy(max_failures=3,
                                                              restore_retry_num=2))
    try:
        for trial in trials:
            log.record(trial, TrialResumed())
            log.record(trial, TrialStarted(node=NODE))
            if trial == flaky:
                for attempt in (1, 2):
                    log.record(trial, TrialFailed(RestoreError(
                        "builtins.FileNotFoundError", f"attempt {attempt}: no checkpoint"),
                        node=NODE))
                    log.record(trial, TrialStarted(node=NODE))
            log.record(trial, RestoreSucceeded())
        for step in range(11, 21):
            for trial in trials:
                if trial == aborted and step > 14:
                    continue
                log.record(trial, CheckpointSaved(f"{trial}/checkpoint_{step:06d}"))
            if step == 14:
                log.record(aborted, TrialFailed(AbortError(
                    "ray.tune.error._AbortTrialExecution", "out of disk")))
        for trial in trials:
            if trial != aborted:
                log.record(trial, TrialCompleted())
    finally:
        log.close(clean=True)
    _spread(db)
    return db


def _spread(db: Path) -> None:
    """Event times EVENT_GAP_S apart, the resumed driver's DOWN_S later."""
    with closing(sqlite3.connect(db)) as conn, conn:
        rows = conn.execute("SELECT position, epoch FROM events ORDER BY position").fetchall()
        start = datetime(2026, 12, 1, 10, 0, 0)
        for i, (position, epoch) in enumerate(rows):
            moment = start + timedelta(seconds=i * EVENT_GAP_S + (DOWN_S if epoch == 2 else 0))
            conn.execute("UPDATE events SET recorded_at = ? WHERE position = ?",
                         (moment.isoformat(sep=" "), position))


@pytest.fixture
def newcomer(tmp_path: Path) -> Path:
    """The newcomer's experiment folder."""
    folder = tmp_path / EXPERIMENT
    folder.mkdir()
    write_newcomer_log(folder)
    return folder


@pytest.fixture
def timeline_file(newcomer: Path, invoke: Callable[..., Run], tmp_path: Path) -> Path:
    """``trial-replay timeline -o timeline.html`` of the newcomer's experiment."""
    page = tmp_path / "timeline.html"
    run = invoke("--db", newcomer, "timeline", "-o", page)
    assert run.exit_code == 0, run.stderr
    return page


# What a person sees, measured in the page: boxes in CSS pixels of the window.
_GEOMETRY = """() => {
  const box = (el) => { const r = el.getBoundingClientRect();
    return {left: r.left, right: r.right, top: r.top, bottom: r.bottom, width: r.width,
            height: r.height}; };
  const svg = document.querySelector("svg.timeline");
  return {
    window: window.innerWidth,
    scrollWidth: document.documentElement.scrollWidth,
    svg: box(svg),
    markers: [...svg.querySelectorAll("path.marker")].filter(
      (m) => m.getAttribute("visibility") !== "hidden").map(
      (m) => ({decision: m.dataset.decision, ...box(m)})),
    down: [...svg.querySelectorAll("rect.driver-down")].map(box),
    downLabels: [...svg.querySelectorAll("text.driver-down-label")].map(
      (t) => ({text: t.textContent, visibility: t.getAttribute("visibility"), ...box(t)})),
    epochs: [...svg.querySelectorAll("line.epoch")].map(box),
    labels: [...svg.querySelectorAll("text.trial-label")].map(box),
    spans: [...svg.querySelectorAll("rect.span")].map(box),
  };
}"""


def _fits(geometry: dict[str, Any]) -> None:
    """Nothing wider than the window, every mark on screen, the text at its size."""
    width = geometry["window"]
    assert geometry["scrollWidth"] <= width  # no horizontal scroll bar
    assert geometry["svg"]["right"] <= width
    markers = geometry["markers"]
    assert any(m["decision"] == "GIVE_UP" for m in markers)
    for marker in markers:
        assert 0 <= marker["left"] and marker["right"] <= width, marker
    assert max(s["right"] for s in geometry["spans"]) <= width
    # 12 px text stays 12 px (the picture is laid out at the window's width, not shrunk)
    assert min(label["height"] for label in geometry["labels"]) >= 11


def _shaded(geometry: dict[str, Any]) -> None:
    """The driver-down stretch is a visible band before the resumed driver's line, labelled."""
    (down,) = geometry["down"]
    (epoch,) = geometry["epochs"]
    (label,) = geometry["downLabels"]
    assert down["width"] >= 100  # a minute of a six-minute run, at about 1000 px
    assert abs(down["right"] - epoch["left"]) <= 2  # it ends where the new driver begins
    assert label["text"] == "driver down" and label["visibility"] != "hidden"
    assert down["left"] <= (label["left"] + label["right"]) / 2 <= down["right"]
    assert down["bottom"] >= max(s["bottom"] for s in geometry["spans"]) - 6  # over the rows


def test_the_timeline_file_fits_a_1280_px_window(
    timeline_file: Path, browser_page: Watched, tmp_path: Path
) -> None:
    page = browser_page.page
    page.goto(timeline_file.as_uri())
    geometry = page.evaluate(_GEOMETRY)
    shot = save_screenshot(page, tmp_path, "timeline-file")
    if os.environ.get("UPDATE_SCREENSHOT"):
        TIMELINE_SCREENSHOT.write_bytes(shot.read_bytes())
    _fits(geometry)
    _shaded(geometry)
    assert page.locator("text.driver-down-label").is_visible()
    browser_page.assert_quiet()
    # one file that works offline: nothing asked from anywhere else
    assert all(url.startswith("file://") for url in browser_page.requests)


def test_the_timeline_without_its_script_still_fits(
    timeline_file: Path, browser: Any, tmp_path: Path
) -> None:
    """The SVG alone (a browser without scripts, the .svg file) scales to the window."""
    context = browser.new_context(viewport={"width": 1280, "height": 900},
                                  java_script_enabled=False)
    try:
        page = context.new_page()
        page.goto(timeline_file.as_uri())
        box = page.locator("svg.timeline").bounding_box()
        assert box is not None and box["x"] + box["width"] <= 1280
        markers = page.locator("path.marker[data-decision=GIVE_UP]")
        assert markers.count() >= 1
        for i in range(markers.count()):
            mark = markers.nth(i).bounding_box()
            assert mark is not None and mark["x"] + mark["width"] <= 1280
        save_screenshot(page, tmp_path, "timeline-no-script")
    finally:
        context.close()


def _address(page: Any) -> str:
    """The address as the page has it (history.replaceState: Playwright's page.url lags)."""
    return str(page.evaluate("location.href"))


def test_zoom_into_a_time_range_and_back(
    timeline_file: Path, browser_page: Watched, tmp_path: Path
) -> None:
    page = browser_page.page
    page.goto(timeline_file.as_uri())
    before = page.evaluate(_GEOMETRY)
    page.get_by_role("button", name="Zoom in").click()
    zoomed = page.evaluate(_GEOMETRY)
    zoomed_at = _address(page)
    assert "#t=" in zoomed_at
    assert page.get_by_text("Showing ", exact=False).first.inner_text().startswith("Showing ")
    # the middle of the run fills the plot: spans are wider, the text is not
    assert max(s["width"] for s in zoomed["spans"]) > max(s["width"] for s in before["spans"])
    assert min(x["height"] for x in zoomed["labels"]) == min(x["height"] for x in before["labels"])
    assert zoomed["scrollWidth"] <= zoomed["window"] and zoomed["svg"]["right"] <= 1280
    assert 0 < len(zoomed["markers"]) < len(before["markers"])  # those out of range hidden
    assert all(m["right"] <= 1280 for m in zoomed["markers"])
    # a drag across the plot zooms into that stretch
    plot = page.locator("svg.timeline").bounding_box()
    assert plot is not None
    y = zoomed["spans"][0]["top"] + 5
    page.mouse.move(zoomed["svg"]["left"] + 500, y)
    page.mouse.down()
    page.mouse.move(zoomed["svg"]["left"] + 700, y, steps=5)
    page.mouse.up()
    dragged = _address(page)
    assert dragged != zoomed_at and "#t=" in dragged
    page.reload()  # the live pages reload on new events: the range stays
    assert _address(page) == dragged
    save_screenshot(page, tmp_path, "timeline-zoomed")
    page.get_by_role("button", name="Whole experiment").click()
    assert "#t=" not in _address(page)
    assert page.evaluate(_GEOMETRY)["markers"] == before["markers"]
    browser_page.assert_quiet()


def test_the_served_experiment_fits_and_shades_the_crash(
    newcomer: Path, browser_page: Watched, tmp_path: Path
) -> None:
    page = browser_page.page
    with serving(newcomer / "statemachine.db", EXPERIMENT) as url:
        page.goto(f"{url}/e/{EXPERIMENT}")
        page.get_by_text("Live: checked").wait_for(timeout=10_000)
        page.get_by_role("button", name="Zoom in").wait_for()  # timeline.js ran under the CSP
        geometry = page.evaluate(_GEOMETRY)
        shot = save_screenshot(page, tmp_path, "serve")
        _fits(geometry)
        _shaded(geometry)
        browser_page.assert_quiet()
        assert all(u.startswith(url) or u.startswith("data:") for u in browser_page.requests)
    if os.environ.get("UPDATE_SCREENSHOT"):
        SCREENSHOT.write_bytes(shot.read_bytes())


@pytest.fixture
def hostile_newcomer(tmp_path: Path) -> Path:
    folder = tmp_path / "hostile"
    folder.mkdir()
    return write_newcomer_log(folder, hostile=True)


@pytest.fixture
def hostile_file(hostile_newcomer: Path, invoke: Callable[..., Run], tmp_path: Path) -> Path:
    page = tmp_path / "hostile.html"
    assert invoke("--db", hostile_newcomer, "timeline", "-o", page).exit_code == 0
    return page


def _shows_as_text(watched: Watched, names: list[str] = HOSTILE) -> None:
    page = watched.page
    for name in names:
        assert page.get_by_text(name).filter(visible=True).count() >= 1, name
    assert page.locator("img").count() == 0  # no element made from a name
    assert page.locator("script").evaluate_all(
        "(scripts) => scripts.every((s) => !s.textContent.includes('alert('))")
    watched.assert_quiet()  # no alert ran, nothing raised


def test_hostile_trial_names_render_as_text_in_the_file(
    hostile_file: Path, browser_page: Watched, tmp_path: Path
) -> None:
    page = browser_page.page
    page.goto(hostile_file.as_uri())
    _shows_as_text(browser_page)
    labels = page.locator("text.trial-label").all_text_contents()
    assert any(label.startswith(HOSTILE[0]) for label in labels)
    save_screenshot(page, tmp_path, "hostile-file")


def test_hostile_trial_names_render_as_text_when_served(
    hostile_newcomer: Path, browser_page: Watched, tmp_path: Path
) -> None:
    page = browser_page.page
    with serving(hostile_newcomer, EXPERIMENT) as url:
        page.goto(f"{url}/e/{EXPERIMENT}")
        page.get_by_text("Live: checked").wait_for(timeout=10_000)
        _shows_as_text(browser_page)
        page.get_by_role("link", name=HOSTILE[1]).click()  # its own page, by a quoted link
        page.get_by_role("heading", name=f"Trial {HOSTILE[1]}").wait_for()
        _shows_as_text(browser_page, HOSTILE[1:])
        save_screenshot(page, tmp_path, "hostile-served")
