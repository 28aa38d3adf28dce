"""The served experiment page in a real headless Chromium, as a person uses it (issue 29's
web view, issue 25 item 3): status counts, sort headers, filters, search and pager change the
table without leaving the page, the address keeps them (a reload and the back button show
the same table), a live update patches the changed rows in place and keeps the scroll
position, hostile trial names stay text through every swap, and the trial and nodes pages
link back to filtered tables. Each test saves screenshots (tmp_path; also
``$STATEMACHINE_TEST_SCREENSHOTS``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statemachine.domain.events import TrialFailed
from statemachine.domain.failures import TrainingError
from tests.browser_support import Watched, save_screenshot
from tests.cli.test_serve import serving
from tests.cli.web_logs import EXPERIMENT, MACHINES, POLICY, trial_name, write_many

TRIALS = 250
HOSTILE = {3: "<script>alert(1)</script>", 4: '"><img src=x onerror=alert(2)>'}
#: How long the page may take to show what it fetched (a poll is every 2 s).
WAIT_MS = 15_000


@pytest.fixture(scope="module")
def many_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    db = write_many(tmp_path_factory.mktemp("many") / "statemachine.db", TRIALS,
                    names=HOSTILE)
    with serving(db, EXPERIMENT) as url:
        yield url


def _open(watched: Watched, url: str) -> Any:
    page = watched.page
    page.goto(url)
    page.get_by_text("Live: checked").wait_for(timeout=WAIT_MS)
    page.evaluate("window.__samePage = true")  # gone if the page reloads
    return page


def _showing(page: Any) -> str:
    return str(page.locator("#pager-top .showing").inner_text())


def _wait_showing(page: Any, text: str) -> None:
    page.wait_for_function(
        "(text) => document.querySelector('#pager-top .showing').textContent === text",
        arg=text, timeout=WAIT_MS)


def _column(page: Any, n: int) -> list[str]:
    return list(page.locator(f"#trial-rows tr td:nth-child({n})").all_text_contents())


def _query(page: Any) -> str:
    return str(page.evaluate("location.search"))


def _same_page(page: Any) -> bool:
    return bool(page.evaluate("window.__samePage === true"))


def _text_only(watched: Watched) -> None:
    """The hostile names are on the page as text, and nothing they hold ran or was made."""
    page = watched.page
    for name in HOSTILE.values():
        assert page.get_by_text(name, exact=True).first.is_visible(), name
    assert page.locator("img").count() == 0
    watched.assert_quiet()


def test_the_table_filters_sorts_and_pages_without_leaving_the_page(
    many_url: str, browser_page: Watched, tmp_path: Path
) -> None:
    page = _open(browser_page, f"{many_url}/e/{EXPERIMENT}")
    assert _showing(page) == "Trials 1-100 of 250"
    _text_only(browser_page)
    # a status count filters the table
    page.locator('#status-counts a[data-status="ERROR"]').click()
    _wait_showing(page, "Trials 1-36 of 36 matching the filter")
    assert set(_column(page, 2)) == {"ERROR"}
    assert _query(page) == "?status=ERROR"
    assert page.locator("#filters select[name=status]").input_value() == "ERROR"
    # a header sorts it, the other way on a second click
    page.locator('#trial-table thead a[data-sort="failures"]').click()
    page.wait_for_function("() => location.search.includes('sort=failures')", timeout=WAIT_MS)
    failures = [int(x) for x in _column(page, 3)]
    assert failures == sorted(failures, reverse=True) and failures[0] == 2
    assert "desc=1" in _query(page)
    # a filter of the form joins the others
    page.locator("#filters select[name=restore]").select_option("1")
    page.wait_for_function("() => location.search.includes('restore=1')", timeout=WAIT_MS)
    assert set(_column(page, 2)) == {"ERROR"}
    assert all(int(x.split("/")[1]) > 0 for x in _column(page, 4))
    shown = _showing(page)
    save_screenshot(page, tmp_path, "table-filtered")
    # the address is the table: a reload shows the same one
    rows = _column(page, 1)
    page.reload()
    page.get_by_text("Live: checked").wait_for(timeout=WAIT_MS)
    assert _showing(page) == shown and _column(page, 1) == rows
    assert page.locator("#filters select[name=restore]").input_value() == "1"
    page.evaluate("window.__samePage = true")
    # search a name, then page through everything
    page.get_by_role("link", name="clear").click()
    _wait_showing(page, "Trials 1-100 of 250")
    page.get_by_label("trial name").fill("0024")
    page.get_by_label("trial name").press("Enter")
    _wait_showing(page, "Trials 1-11 of 11 matching the filter")
    assert _column(page, 1) == ["trial_00024"] + [trial_name(n) for n in range(240, 250)]
    page.get_by_role("link", name="clear").click()
    _wait_showing(page, "Trials 1-100 of 250")
    page.locator("#pager-top a[rel=next]").click()
    _wait_showing(page, "Trials 101-200 of 250")
    assert _query(page) == "?page=2"
    assert _same_page(page)  # every change since the reload was fetched, none reloaded
    page.go_back()
    _wait_showing(page, "Trials 1-100 of 250")
    _text_only(browser_page)
    assert all(url.startswith(many_url) for url in browser_page.requests)


def test_the_page_fits_a_1280_px_window(many_url: str, browser_page: Watched,
                                        tmp_path: Path) -> None:
    page = _open(browser_page, f"{many_url}/e/{EXPERIMENT}?sort=failures&desc=1")
    box = page.locator("svg.timeline").bounding_box()
    assert box is not None and box["x"] + box["width"] <= 1280
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    assert page.locator("svg.timeline g.trial").count() == 20  # a bounded timeline
    assert page.locator("svg.overview rect").count() == 3  # and a bar of every status
    save_screenshot(page, tmp_path, "experiment-page")
    browser_page.assert_quiet()


def test_a_live_update_patches_the_rows_and_keeps_the_scroll(
    tmp_path: Path, browser_page: Watched
) -> None:
    from statemachine.log import ExperimentLog

    db = write_many(tmp_path / "statemachine.db", TRIALS, names=HOSTILE)
    with serving(db, EXPERIMENT) as url:
        page = _open(browser_page, f"{url}/e/{EXPERIMENT}")
        page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
        page.wait_for_timeout(200)
        before = page.evaluate("window.scrollY")
        assert before > 500
        changed = trial_name(1)  # RUNNING; a failure makes it PENDING (RECOVER)
        log = ExperimentLog.open(str(db), EXPERIMENT, POLICY)
        try:
            log.record(changed, TrialFailed(TrainingError("builtins.ValueError", "late NaN"),
                                            node=MACHINES[1]))
        finally:
            log.close()
        cell = f'#trial-rows tr[data-trial-id="{changed}"] td:nth-child(2)'
        page.wait_for_function(f"() => document.querySelector('{cell}').textContent === "
                               "'PENDING'", timeout=WAIT_MS)
        assert _same_page(page)  # patched, not reloaded
        assert abs(page.evaluate("window.scrollY") - before) <= 1
        row = page.locator(f'#trial-rows tr[data-trial-id="{changed}"]')
        assert "changed" in (row.get_attribute("class") or "")
        assert "late NaN" in row.inner_text()
        assert page.locator('#status-counts a[data-status="PENDING"] b').inner_text() == "1"
        assert page.get_by_text("1 trial(s) changed").is_visible()
        save_screenshot(page, tmp_path, "live-update")
        _text_only(browser_page)


def test_the_trial_and_nodes_pages_link_back_to_the_table(
    many_url: str, browser_page: Watched, tmp_path: Path
) -> None:
    page = browser_page.page
    page.goto(f"{many_url}/e/{EXPERIMENT}/t/{trial_name(35)}")
    page.get_by_role("heading", name="Failures").wait_for()
    assert page.locator("table.failures tbody tr").count() == 3
    assert "Restore failure # 1" in page.locator("table.failures").inner_text()
    attempts = page.locator("table.attempts tbody tr td:nth-child(4)").all_text_contents()
    assert attempts == ["none: from scratch", "c1", "c1"]
    box = page.locator("svg.timeline").bounding_box()
    assert box is not None and box["x"] + box["width"] <= 1280
    save_screenshot(page, tmp_path, "trial-page")
    page.goto(f"{many_url}/e/{EXPERIMENT}/nodes")
    assert page.locator("table.nodes tbody tr").count() == 3
    save_screenshot(page, tmp_path, "nodes-page")
    page.get_by_role("link", name=MACHINES[2].hostname).click()
    page.get_by_text("Live: checked").wait_for(timeout=WAIT_MS)
    assert "matching the filter" in _showing(page)
    assert set(_column(page, 9)) == {MACHINES[2].node_ip}
    browser_page.assert_quiet()
