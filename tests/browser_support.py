"""A real headless Chromium for the tests: the one way the suite runs a browser.

The system's Chromium (Debian's ``chromium`` package; ``.ci/run`` installs it when missing)
driven by Playwright for Python pointed at it with ``executable_path`` (Playwright's own
browser downloads are never used). The ``browser`` fixture (tests/conftest.py) starts it once
per session; ``browser_page`` gives each test a fresh page in a 1280 x 900 window that
records what a person would not see in the page itself: console errors (a script refused by
the Content-Security-Policy says so there), uncaught script errors, dialogs (an ``alert`` a
hostile name managed to run) and every request (a page that must work offline asks nothing
from the network).

Without Playwright or Chromium the browser tests are skipped with the reason, except when
``CI`` is set: then they fail, as the PostgreSQL tests do (tests/conftest.py).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

#: Names the system's Chromium goes by (``STATEMACHINE_TEST_CHROMIUM`` names another).
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM_ENV = "STATEMACHINE_TEST_CHROMIUM"
#: The window the pages are checked in (the issue's: "fits a 1280 px window").
WINDOW = {"width": 1280, "height": 900}


def unavailable(reason: str) -> NoReturn:
    """Skip the test with ``reason``; fail it under ``CI`` (a browser test must run there)."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set: the browser tests must run; .ci/run installs "
                    "Chromium with apt-get and Playwright with the test extra)")
    pytest.skip(reason)


def find_chromium() -> str | None:
    """The system Chromium's path: ``$STATEMACHINE_TEST_CHROMIUM``, else on ``PATH``."""
    named = os.environ.get(CHROMIUM_ENV)
    if named:
        return named if Path(named).is_file() else None
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


@contextmanager
def launched_browser() -> Iterator[Browser]:
    """Headless Chromium, closed (and its driver stopped) on exit."""
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError:
        unavailable("Playwright for Python is not installed (pip install -e '.[test]')")
    executable = find_chromium()
    if executable is None:
        unavailable(f"Chromium is not installed (apt-get install chromium, or set "
                    f"{CHROMIUM_ENV})")
    with sync_playwright() as playwright:
        try:
            browser = playwright.chromium.launch(
                executable_path=executable, headless=True,
                # root in a container: Chromium's sandbox needs user namespaces it lacks
                args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"],
            )
        except Error as exc:
            unavailable(f"Chromium at {executable} did not start: "
                        f"{str(exc).strip().splitlines()[0]}")
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class Watched:
    """A page and what it did that a person would not see on it."""

    page: Page
    console_errors: list[str] = field(default_factory=list)
    script_errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    def assert_quiet(self) -> None:
        """No console error, no uncaught script error, no dialog."""
        assert not self.console_errors, self.console_errors
        assert not self.script_errors, self.script_errors
        assert not self.dialogs, self.dialogs


@contextmanager
def watched_page(browser: Browser) -> Iterator[Watched]:
    """A fresh page in a 1280 x 900 window (its own context: no shared storage)."""
    context = browser.new_context(viewport=WINDOW)  # type: ignore[arg-type]
    page = context.new_page()
    watched = Watched(page)

    def on_console(message: Any) -> None:
        if message.type == "error":
            watched.console_errors.append(message.text)

    def on_dialog(dialog: Any) -> None:
        watched.dialogs.append(f"{dialog.type}: {dialog.message}")
        dialog.dismiss()

    page.on("console", on_console)
    page.on("pageerror", lambda error: watched.script_errors.append(str(error)))
    page.on("dialog", on_dialog)
    page.on("request", lambda request: watched.requests.append(request.url))
    try:
        yield watched
    finally:
        context.close()


#: A folder that also receives every screenshot (CI keeps it as the run's artifacts).
SCREENSHOTS_ENV = "STATEMACHINE_TEST_SCREENSHOTS"


def save_screenshot(page: Page, folder: Path, name: str) -> Path:
    """A screenshot of the whole page, kept as a test artifact in ``folder`` (the test's
    ``tmp_path``: pytest keeps the last runs' folders, and the path is printed), and copied
    into ``$STATEMACHINE_TEST_SCREENSHOTS`` when that is set."""
    path = folder / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")
    artifacts = os.environ.get(SCREENSHOTS_ENV)
    if artifacts:
        Path(artifacts).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, Path(artifacts) / path.name)
    return path
