"""``trial-replay serve``: real HTTP requests to the console script, pages that follow a log
being written, hostile names escaped, and a real headless Chromium rendering the page."""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from statemachine.domain.events import TrialAdded, TrialFailed, TrialStarted
from statemachine.domain.failures import TrainingError
from statemachine.domain.policy import RetryPolicy
from tests.cli.conftest import EXP
from tests.cli.test_console_script import _lines, _script

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT = ROOT / "docs" / "serve.png"


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read().decode("utf-8")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8")


@pytest.fixture
def served(fixture_db: Path) -> Iterator[str]:
    """``trial-replay --db LOG serve --port 0`` running; yields its base URL."""
    proc = subprocess.Popen(
        [_script(), "serve", EXP, "--port", "0", "--db", str(fixture_db)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_lines, args=(proc.stdout, lines), daemon=True).start()
    try:
        first = lines.get(timeout=60)
        assert first.startswith("Serving http://127.0.0.1:"), first
        url = first.split()[1]
        assert url.endswith(f"/e/{EXP}")
        yield url.rsplit("/e/", 1)[0]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert "Traceback" not in proc.stderr.read()  # type: ignore[union-attr]


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

def _chromium() -> str:
    """The system's Chromium, installed from the Debian packages when missing."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("Chromium is not installed and apt-get cannot install it here "
                    "(apt-get install chromium)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    done = subprocess.run(["apt-get", "install", "-y", "-q", "chromium"], capture_output=True,
                          text=True, timeout=600, env=env, check=False)
    if done.returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], capture_output=True, timeout=600,
                       env=env, check=False)
        done = subprocess.run(["apt-get", "install", "-y", "-q", "chromium"],
                              capture_output=True, text=True, timeout=600, env=env,
                              check=False)
    found = shutil.which("chromium")
    if done.returncode != 0 or not found:
        pytest.skip(f"Chromium could not be installed (apt-get install chromium: "
                    f"{(done.stderr or done.stdout).strip().splitlines()[-1:]})")
    return found


def _headless(browser: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--hide-scrollbars", "--no-first-run", *args],
        capture_output=True, text=True, timeout=180, check=False,
    )


@pytest.mark.slow
def test_headless_chromium_renders_the_live_page(served: str, tmp_path: Path) -> None:
    browser = _chromium()
    page = f"{served}/e/{EXP}/t/c_given_up"
    # the DOM after the page's script ran: it asked /api/version and says so
    dom = _headless(browser, "--virtual-time-budget=5000", "--dump-dom", page)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "Trial c_given_up" in dom.stdout
    assert "Live: checked" in dom.stdout, dom.stdout[-1500:]
    shot = tmp_path / "serve.png"
    started = time.monotonic()
    done = _headless(browser, "--window-size=1280,900", f"--screenshot={shot}",
                     "--virtual-time-budget=3000", f"{served}/e/{EXP}")
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000, (len(data), started)
    if os.environ.get("UPDATE_SCREENSHOT"):
        SCREENSHOT.write_bytes(data)


def test_pages_of_an_ingested_log_say_it_was_reconstructed(tmp_path: Path) -> None:
    from tests.ingest.conftest import VERSIONS, ingest_json, ray_folder

    db = tmp_path / "ingested.db"
    report = ingest_json(ray_folder(VERSIONS[-1], "faults", tmp_path / "faults"), "--db", db)
    trial = report["trials"][0]["trial_id"]
    proc = subprocess.Popen(
        [_script(), "serve", "faults", "--port", "0", "--db", str(db)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_lines, args=(proc.stdout, lines), daemon=True).start()
    try:
        base = lines.get(timeout=60).split()[1].rsplit("/e/", 1)[0]
        for path in ("/e/faults", f"/e/faults/t/{trial}"):
            status, page = _get(base + path)
            assert status == 200
            assert '<p class="reconstructed">Reconstructed from Ray&#x27;s files' in page
    finally:
        proc.terminate()
        proc.wait(timeout=30)
