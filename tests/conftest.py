"""Shared fixtures: a SQLite event log URL and a PostgreSQL one (in a schema of its own).

PostgreSQL: the server named by ``STATEMACHINE_TEST_PG_URL`` (default: the local test
server). When it is not reachable the test is skipped with the reason, except when ``CI`` is
set: then an unreachable server fails the test. Mark such tests ``@pytest.mark.postgres``.

A real headless Chromium (``browser``, ``browser_page``; tests/browser_support.py) is skipped
or failed the same way.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from sqlalchemy.engine import make_url

from tests.browser_support import Watched, launched_browser, watched_page
from tests.s3_server import S3Server, running_s3_server

if TYPE_CHECKING:
    from playwright.sync_api import Browser

PG_URL_ENV = "STATEMACHINE_TEST_PG_URL"
DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A URL for a new SQLite event log file in the test's temporary directory."""
    return f"sqlite:///{tmp_path / 'events.db'}"


def _libpq(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def pg_server_url() -> str:
    """The PostgreSQL server's URL, once it answered (else skip, or fail under ``CI``)."""
    import psycopg

    url = os.environ.get(PG_URL_ENV, DEFAULT_PG_URL)
    try:
        psycopg.connect(_libpq(url), connect_timeout=3).close()
    except Exception as exc:
        reason = f"PostgreSQL not reachable at {make_url(url)!r}: {exc}".strip()
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (CI is set: PostgreSQL tests must run)")
        pytest.skip(f"{reason}; start it or set {PG_URL_ENV}")
    return url


@pytest.fixture
def pg_url(pg_server_url: str) -> Iterator[str]:
    """A PostgreSQL URL whose ``search_path`` is a new, empty schema, dropped afterwards."""
    import psycopg

    schema = f"sm_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_libpq(pg_server_url), autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    yield (
        make_url(pg_server_url)
        .update_query_dict({"options": f"-csearch_path={schema}"})
        .render_as_string(hide_password=False)
    )
    with psycopg.connect(_libpq(pg_server_url), autocommit=True) as conn:
        conn.execute("SET lock_timeout = '20s'")
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A real S3 API on 127.0.0.1 (moto's server), for the whole session; killed at its end.

    Skipped with the reason when it cannot start, except when ``CI`` is set: then it fails.
    """
    log = tmp_path_factory.mktemp("s3") / "moto.log"
    try:
        server = running_s3_server(log)
        started = server.__enter__()
    except RuntimeError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"the S3 server could not start: {exc} (CI is set: S3 tests must run)")
        pytest.skip(f"the S3 server could not start: {exc}")
    try:
        yield started
    finally:
        server.__exit__(None, None, None)


@pytest.fixture
def s3_env(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """The S3 server, with this process's AWS variables pointing at it (restored after)."""
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    return s3_server


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    """Headless Chromium for the session (tests/browser_support.py): skipped with the reason
    when it cannot run, except when ``CI`` is set: then it fails."""
    with launched_browser() as started:
        yield started


@pytest.fixture
def browser_page(browser: Browser) -> Iterator[Watched]:
    """A fresh page in a 1280 x 900 window, with what it logged, raised, alerted, asked."""
    with watched_page(browser) as watched:
        yield watched
