"""``trial-replay serve``: real HTTP requests to the console script, pages that follow a log
being written, hostile names escaped, and the page's script running in a real headless
Chromium (more of the browser: tests/cli/test_browser.py)."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import pytest

from statemachine.domain.events import TrialAdded, TrialFailed, TrialStarted
from statemachine.domain.failures import TrainingError
from statemachine.domain.policy import RetryPolicy
from tests.browser_support import Watched, save_screenshot
from tests.cli.conftest import EXP
from tests.cli.test_console_script import _lines, _script


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read().decode("utf-8")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8")


@contextmanager
def serving(db: Path, experiment: str) -> Iterator[str]:
    """``trial-replay --db DB serve EXPERIMENT --port 0`` running; yields its base URL."""
    proc = subprocess.Popen(
        [_script(), "serve", experiment, "--port", "0", "--db", str(db)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_lines, args=(proc.stdout, lines), daemon=True).start()
    try:
        first = lines.get(timeout=60)
        assert first.startswith("Serving http://127.0.0.1:"), first
        url = first.split()[1]
        assert url.endswith(f"/e/{quote(experiment, safe='')}")
        yield url.rsplit("/e/", 1)[0]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert "Traceback" not in proc.stderr.read()  # type: ignore[union-attr]


@pytest.fixture
def served(fixture_db: Path) -> Iterator[str]:
    """The fixture log served; yields the base URL."""
    with serving(fixture_db, EXP) as url:
        yield url


def test_pages_over_http(served: str) -> None:
    status, index = _get(served + "/")
    assert status == 200 and f'href="/e/{EXP}"' in index and "other_exp" in index
    status, page = _get(f"{served}/e/{EXP}")
    assert status == 200
    assert "<svg" in page and "Timeline of experiment fixture_exp" in page
    assert f'href="/e/{EXP}/t/c_given_up"' in page
    assert "Driver sessions: epoch 1 (crashed), epoch 2 (clean)" in page
    status, trial = _get(f"{served}/e/{EXP}/t/c_given_up")
    assert status == 200
    assert "Trial c_given_up is ERROR" in trial
    assert "Restore failure # 2 on node 10.0.0.7 (node-id a7a7a7a7a7a7...) (retry 2 of 2)" in trial
    assert _get(f"{served}/e/nope")[0] == 404
    assert _get(f"{served}/e/{EXP}/t/nope")[0] == 404


def test_pages_follow_a_log_being_written(served: str, fixture_db: Path) -> None:
    from statemachine.log import ExperimentLog

    before = json.loads(_get(served + "/api/version")[1])["version"]
    assert json.loads(_get(served + "/api/version")[1])["version"] == before  # stable
    hostile = "<script>alert(1)</script>&"
    log = ExperimentLog.open(str(fixture_db), EXP, RetryPolicy(max_failures=1))
    try:
        log.record("g_live", TrialAdded({}))
        log.record("g_live", TrialStarted())
        log.record("g_live", TrialFailed(TrainingError("builtins.ValueError", hostile)))
    finally:
        log.close()
    after = json.loads(_get(served + "/api/version")[1])["version"]
    assert after != before
    page = _get(f"{served}/e/{EXP}")[1]
    assert 'href="/e/fixture_exp/t/g_live"' in page and "epoch 3" in page
    trial = _get(f"{served}/e/{EXP}/t/g_live")[1]
    assert "Decision RECOVER" in trial
    assert hostile not in trial and html_escaped(hostile) in trial
    assert quote(EXP) in page


def html_escaped(text: str) -> str:
    import html

    return html.escape(text, quote=True)


def test_bad_port_is_one_line(fixture_db: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([_script(), "--db", str(fixture_db), "serve", EXP, "--port",
                               str(port)], capture_output=True, text=True, timeout=60,
                              check=False)
    assert done.returncode == 2
    assert done.stderr.startswith("trial-replay: error: cannot listen on 127.0.0.1:")
    assert done.stderr.count("\n") == 1


# ------------------------------------------------------------------ a real browser


def test_the_live_page_in_a_real_browser_runs_its_script(
    served: str, browser_page: Watched, tmp_path: Path
) -> None:
    """The page's own script (no inline script: the CSP refuses it) asked /api/version and
    says so; nothing was refused or raised."""
    page = browser_page.page
    page.goto(f"{served}/e/{EXP}/t/c_given_up")
    page.get_by_text("Live: checked").wait_for(timeout=10_000)
    assert page.get_by_role("heading", name="Trial c_given_up").is_visible()
    browser_page.assert_quiet()
    assert all(url.startswith(served) for url in browser_page.requests)
    page.goto(f"{served}/e/{EXP}")
    page.get_by_text("Live: checked").wait_for(timeout=10_000)
    save_screenshot(page, tmp_path, "serve-fixture")
    browser_page.assert_quiet()


def test_pages_of_an_ingested_log_say_it_was_reconstructed(tmp_path: Path) -> None:
    from tests.ingest.conftest import VERSIONS, ingest_json, ray_folder

    db = tmp_path / "ingested.db"
    report = ingest_json(ray_folder(VERSIONS[-1], "faults", tmp_path / "faults"), "--db", db)
    trial = report["trials"][0]["trial_id"]
    with serving(db, "faults") as base:
        for path in ("/e/faults", f"/e/faults/t/{trial}"):
            status, page = _get(base + path)
            assert status == 200
            assert '<p class="reconstructed">Reconstructed from Ray&#x27;s files' in page
