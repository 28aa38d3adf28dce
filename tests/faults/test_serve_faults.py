"""``trial-replay serve`` attacked and broken: the console script in a subprocess, real HTTP.

- Another site's page must not read the pages (DNS rebinding): a foreign ``Host`` is refused,
  every answer carries the security headers, pages hold no inline script.
- Idle and half-sent connections are closed after the idle timeout and never starve a request.
- A slow page does not hold up the other requests (no global lock).
- A log deleted, swapped or corrupted while serving answers 503 with the one-line reason, and
  the pages come back with the log.
- What held in the red-team pass: the default bind is 127.0.0.1, hostile text in every field
  is escaped on every page, path traversal is a 404, methods other than GET/HEAD are refused.
"""

from __future__ import annotations

import html
import http.client
import json
import os
import queue
import shutil
import socket
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.cli.conftest import EXP, copy_fixture, folder_state
from tests.cli.test_console_script import _lines, _script
from tests.faults.faultkit import Figures, read_log
from tests.faults.test_hostile_display import record_hostile

pytestmark = [pytest.mark.faults]

#: The headers every answer carries (values checked in test_foreign_hosts_are_refused...).
SECURITY_HEADERS = ("content-security-policy", "x-content-type-options", "referrer-policy")


# ------------------------------------------------------------------ the server and requests

@dataclass
class Served:
    """A running ``trial-replay serve``: its port, first URL and process."""

    port: int
    url: str
    proc: subprocess.Popen[str]
    stderr: list[str] = field(default_factory=list)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextmanager
def serving(db: Path | str, *args: str) -> Iterator[Served]:
    """``trial-replay --db DB serve --port 0 ARGS`` until the block ends (then SIGTERM, by pid).

    Its stderr is in ``Served.stderr`` (complete once the block has ended); the block fails if
    the server printed a traceback.
    """
    env = {k: v for k, v in os.environ.items() if k != "STATEMACHINE_DB_URL"}
    proc = subprocess.Popen([_script(), "--db", str(db), "serve", "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_lines, args=(proc.stdout, lines), daemon=True).start()
    errors: list[str] = []
    err_reader = threading.Thread(target=lambda: errors.extend(proc.stderr or []), daemon=True)
    err_reader.start()
    served = None
    try:
        first = lines.get(timeout=60)
        assert first.startswith("Serving http://"), (first, errors)
        url = first.split()[1]
        port = int(url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
        served = Served(port, url, proc, errors)
        yield served
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        err_reader.join(timeout=10)
    assert not any("Traceback" in line for line in errors), "".join(errors)


@dataclass
class Answer:
    """One HTTP answer: status, headers (lower-case names), body."""

    status: int
    headers: dict[str, str]
    body: str


def request(port: int, path: str, *, method: str = "GET", host: str | None = None,
            timeout: float = 60) -> Answer:
    """``METHOD path`` sent as given (no normalising) to 127.0.0.1:``port``; ``host`` is the
    ``Host`` header (default ``127.0.0.1:port``)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        conn.putheader("Host", host if host is not None else f"127.0.0.1:{port}")
        conn.endheaders()
        response = conn.getresponse()
        body = response.read().decode("utf-8", "replace")
        return Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, body)
    finally:
        conn.close()


def fixture_copy(tmp_path: Path) -> Path:
    folder = tmp_path / EXP
    folder.mkdir()
    return copy_fixture(folder / "statemachine.db")


def events_in(db: Path, experiment: str = EXP) -> int:
    return len(read_log(f"sqlite:///{db}", experiment).rows)


class _Tags(HTMLParser):
    """Every start tag of a page with its attributes, and the text inside each <script>."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.script_text: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.script_text.append(data)


def parsed(page: str) -> _Tags:
    tags = _Tags()
    tags.feed(page)
    tags.close()
    return tags


#: The elements the pages are made of; a hostile value that became markup adds another.
PAGE_TAGS = {"html", "head", "meta", "title", "link", "script", "body", "main", "nav", "a",
             "h1", "h2", "p", "table", "thead", "tbody", "tr", "th", "td", "svg", "rect", "g",
             "text", "path", "line", "defs", "clippath",
             # the experiment page's counts, filters and pager
             "b", "div", "span", "form", "label", "select", "option", "input", "button"}


def assert_no_markup_from_the_log(page: str, what: str) -> None:
    """Only the page's own elements, no event handler attribute, no inline script, every
    script from this server."""
    tags = parsed(page)
    unknown = {t for t, _ in tags.tags} - PAGE_TAGS
    assert not unknown, (what, unknown)
    handlers = [(t, a) for t, attrs in tags.tags for a in attrs if a.lower().startswith("on")]
    assert not handlers, (what, handlers)
    assert not tags.script_text, (what, tags.script_text)
    for tag, attrs in tags.tags:
        if tag == "script":
            assert (attrs.get("src") or "").startswith("/static/"), (what, attrs)
        for name in ("href", "src"):
            value = attrs.get(name)
            assert value is None or value.startswith("/"), (what, tag, name, value)


# ------------------------------------------------------------------ issue 23, item 4

def test_foreign_hosts_are_refused_and_every_answer_has_security_headers(
    tmp_path: Path, reliability: Callable[[Figures], None]
) -> None:
    """DNS rebinding: a page of evil.example whose name resolves to 127.0.0.1 sends
    ``Host: evil.example:PORT``. It is refused (421) before the log is read; the names of a
    loopback bind are served. Every answer (200, 404, 421, 405) carries the CSP (scripts from
    this server only, no framing), nosniff and a referrer policy; pages hold no inline
    script."""
    db = fixture_copy(tmp_path)
    before = folder_state(db.parent)
    foreign = ["evil.example", "evil.example:{port}", "127.0.0.1.evil.example:{port}",
               "localhost.evil.example", "[::2]:{port}", "10.0.0.1:{port}", ""]
    with serving(db) as served:
        port = served.port
        answers = []
        for host in foreign:
            for path in ("/", f"/e/{EXP}", f"/e/{EXP}/t/c_given_up", "/api/version"):
                answer = request(port, path, host=host.format(port=port))
                assert answer.status in (400, 421), (host, path, answer.status)
                assert "c_given_up" not in answer.body and "fixture_exp" not in answer.body
                answers.append(answer)
        for host in ("127.0.0.1:{port}", "localhost:{port}", "LOCALHOST:{port}", "[::1]:{port}",
                     "127.0.0.1", "localhost."):
            answer = request(port, f"/e/{EXP}", host=host.format(port=port))
            assert answer.status == 200, (host, answer.status, answer.body[:300])
            assert "c_given_up" in answer.body
            answers.append(answer)
        answers.append(request(port, "/e/nope"))
        assert answers[-1].status == 404
        answers.append(request(port, "/", method="POST"))
        assert answers[-1].status == 405
        for answer in answers:
            missing = [h for h in SECURITY_HEADERS if h not in answer.headers]
            assert not missing, (answer.status, missing)
            csp = answer.headers["content-security-policy"]
            directives = {d.split()[0]: d.split()[1:] for d in csp.split(";") if d.strip()}
            assert directives["frame-ancestors"] == ["'none'"], csp
            assert directives["script-src"] == ["'self'"], csp
            assert directives["default-src"] == ["'none'"], csp
            assert answer.headers["x-content-type-options"] == "nosniff"
            assert answer.headers["referrer-policy"] == "no-referrer"
        page = request(port, f"/e/{EXP}/t/c_given_up")
        assert_no_markup_from_the_log(page.body, "trial page")
        for tag, attrs in parsed(page.body).tags:  # the page's own script and style load
            if tag in ("script", "link"):
                asset = request(port, str(attrs.get("src") or attrs.get("href")))
                assert asset.status == 200 and asset.body.strip(), attrs
                assert "x-content-type-options" in asset.headers
    assert folder_state(db.parent) == before
    reliability(Figures(
        scenario="Serve: another site's page (DNS rebinding)",
        injected=f"{len(foreign)} foreign Host headers (evil.example, a look-alike of "
                 "127.0.0.1 and localhost, another address, none) on every page and "
                 "/api/version; 6 spellings of the loopback names (test_serve_faults.py)",
        times=len(foreign) * 4, events_written=events_in(db), events_lost=0, duplicates=0,
        verify="every foreign Host refused (421, 400 when empty) before the log is read; "
               "loopback names served; CSP, nosniff, Referrer-Policy on every answer; the log "
               "byte-identical",
    ))


def test_a_non_loopback_bind_warns_and_still_checks_hosts(tmp_path: Path) -> None:
    """``--host 0.0.0.0``: one warning line that anyone on the network can read the pages;
    names of this machine and IP addresses are served, a foreign name is not."""
    db = fixture_copy(tmp_path)
    with serving(db, "--host", "0.0.0.0") as served:
        answer = request(served.port, f"/e/{EXP}")  # Host: 127.0.0.1:PORT
        assert answer.status == 200
        assert request(served.port, "/", host=f"{socket.gethostname()}:{served.port}"
                       ).status == 200
        assert request(served.port, "/", host=f"evil.example:{served.port}").status == 421
        warning = [line for line in served.stderr if "warning" in line]
    assert len(warning) == 1, served.stderr
    line = warning[0]
    assert line.startswith("trial-replay: warning: serving on 0.0.0.0"), line
    assert "no authentication" in line and "anyone" in line, line
    assert line.count("\n") == 1


def test_allow_host_adds_a_name(tmp_path: Path) -> None:
    """``--allow-host`` (a DNS name or a proxy in front): that name is served too, in any
    case, others still refused with a line saying how to add one."""
    with serving(fixture_copy(tmp_path), "--allow-host", "Replay.Example.") as served:
        assert request(served.port, "/", host=f"replay.example:{served.port}").status == 200
        assert request(served.port, "/", host="REPLAY.EXAMPLE").status == 200
        assert request(served.port, "/", host=f"localhost:{served.port}").status == 200
        refused = request(served.port, "/", host=f"other.example:{served.port}")
    assert refused.status == 421
    assert "replay.example" in refused.body and "--allow-host" in refused.body


def test_idle_and_half_sent_connections_are_closed_and_starve_nothing(
    tmp_path: Path, reliability: Callable[[Figures], None]
) -> None:
    """200 connections that send nothing or half a request head: a request is answered
    meanwhile, and the server closes every one of them after its idle timeout (a thread per
    connection, forever, before)."""
    db = fixture_copy(tmp_path)
    idle: list[socket.socket] = []
    with serving(db) as served:
        try:
            for i in range(200):
                s = socket.create_connection(("127.0.0.1", served.port), timeout=30)
                if i % 2:
                    s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
                idle.append(s)
            answer = request(served.port, f"/e/{EXP}", timeout=30)
            assert answer.status == 200 and "c_given_up" in answer.body
            started = time.monotonic()
            closed = 0
            for s in idle:
                try:
                    data = s.recv(65536)  # blocks until the server closes it (30 s at most)
                except ConnectionResetError:
                    data = b""
                except TimeoutError:
                    pytest.fail(f"an idle connection still open after 30 s ({closed} closed)")
                assert data == b"", data[:200]
                closed += 1
            waited = time.monotonic() - started
            assert request(served.port, "/").status == 200  # and still serving
        finally:
            for s in idle:
                s.close()
    reliability(Figures(
        scenario="Serve: idle connections",
        injected="200 connections held open, half sending nothing, half half a request "
                 "head; one page request meanwhile (test_serve_faults.py)",
        times=200, events_written=events_in(db), events_lost=0, duplicates=0,
        verify=f"the request answered while all 200 were open; every one closed by the "
               f"server within {waited:.1f} s of the request",
    ))


# ------------------------------------------------------------------ issue 23, item 5


def build_long_trial(db: Path, checkpoints: int) -> int:
    """One experiment ``long`` whose one trial ``t`` saved ``checkpoints`` checkpoints: its
    page folds and draws that whole history (a listing reads its state, and is fast)."""
    from statemachine import CheckpointSaved, RetryPolicy, TrialAdded, TrialStarted
    from statemachine.log import ExperimentLog

    with ExperimentLog.open(str(db), "long", RetryPolicy(max_failures=3),
                            sqlite_synchronous="OFF") as log:
        log.record_many([("t", TrialAdded()), ("t", TrialStarted())])
        for start in range(0, checkpoints, 5000):
            log.record_many([("t", CheckpointSaved(f"c{i}"))
                             for i in range(start, min(start + 5000, checkpoints))])
    return events_in(db, "long")


@pytest.mark.slow
def test_a_slow_page_does_not_hold_up_other_requests(
    tmp_path: Path, reliability: Callable[[Figures], None]
) -> None:
    """The page of a trial with a long history takes seconds to build (it folds and draws
    every event; listings read state and no longer do); meanwhile the live poll and a small
    trial page are answered, more than once, before it is done (every request waited for it
    under one global lock before)."""
    db = fixture_copy(tmp_path)
    big = build_long_trial(db, 60_000)
    with serving(db) as served:
        port = served.port
        request(port, "/api/version")
        slow: dict[str, float] = {}

        def load_big_page() -> None:
            begun = time.monotonic()
            answer = request(port, "/e/long/t/t", timeout=300)
            slow["status"], slow["seconds"] = answer.status, time.monotonic() - begun

        loader = threading.Thread(target=load_big_page)
        loader.start()
        time.sleep(0.2)  # the big page is being built
        waits: list[float] = []
        answered_meanwhile = 0
        while loader.is_alive() or not waits:
            begun = time.monotonic()
            assert request(port, "/api/version").status == 200
            assert request(port, f"/e/{EXP}/t/c_given_up").status == 200
            waits.append(time.monotonic() - begun)
            answered_meanwhile += loader.is_alive()
        loader.join(timeout=300)
    assert slow.get("status") == 200, slow
    assert answered_meanwhile >= 2, (
        f"the big page ({slow['seconds']:.1f} s) was done before the small requests were "
        f"answered ({waits}): they waited for it")
    waits = waits[:answered_meanwhile]
    reliability(Figures(
        scenario="Serve: one slow page",
        injected=f"the page of a trial with {big:,} events requested; meanwhile polls and "
                 "small trial pages in a loop (test_serve_faults.py)",
        times=answered_meanwhile, events_written=events_in(db) + big, events_lost=0,
        duplicates=0,
        verify=f"{2 * answered_meanwhile} small requests answered while the page was built "
               f"(poll + trial page: {max(waits):.2f} s at most; the big page "
               f"{slow['seconds']:.1f} s)",
    ))


# ------------------------------------------------------------------ issue 23, item 6

def assert_unavailable(port: int, expected: str) -> None:
    """Every page and the poll answer 503 with the one-line reason."""
    for path in ("/", f"/e/{EXP}", f"/e/{EXP}/t/c_given_up"):
        answer = request(port, path, timeout=30)
        assert answer.status == 503, (path, answer.status, answer.body[:500])
        assert expected in html.unescape(answer.body), (path, answer.body[:500])
        assert "Traceback" not in answer.body
    poll = request(port, "/api/version", timeout=30)
    assert poll.status == 503
    reason = json.loads(poll.body)["error"]
    assert expected in reason and "\n" not in reason, reason


def assert_served(port: int) -> None:
    for path in ("/", f"/e/{EXP}", f"/e/{EXP}/t/c_given_up", "/api/version"):
        answer = request(port, path, timeout=30)
        assert answer.status == 200, (path, answer.status, answer.body[:500])


@pytest.mark.parametrize("given", ["file", "folder"])
def test_a_deleted_log_answers_503_and_the_pages_come_back_with_it(
    tmp_path: Path, given: str, reliability: Callable[[Figures], None]
) -> None:
    """The log deleted while serving (``--db`` a file or its folder): 503 naming the missing
    file on every page and on the poll, once on stderr; served again once it is back (no
    answer at all and a traceback per request before)."""
    db = fixture_copy(tmp_path)
    kept = tmp_path / "kept.db"
    with serving(db if given == "file" else db.parent) as served:
        assert_served(served.port)
        shutil.move(db, kept)
        assert_unavailable(served.port, f"no event log at {db}")
        assert_unavailable(served.port, f"no event log at {db}")
        shutil.move(kept, db)
        assert_served(served.port)
    said = [line for line in served.stderr if "no event log at" in line]
    assert len(said) == 1, served.stderr
    assert any("readable again" in line for line in served.stderr), served.stderr
    reliability(Figures(
        scenario="Serve: the log deleted while serving",
        injected="the SQLite file moved away while serving (--db the file, --db its "
                 "folder), then moved back (test_serve_faults.py)",
        times=2, events_written=events_in(db), events_lost=0, duplicates=0,
        verify="every page and the poll 503 with 'no event log at PATH: the file does not "
               "exist', said once on stderr; 200 again once the file is back",
    ))


def test_a_swapped_or_corrupted_log_answers_503_and_recovers(
    tmp_path: Path, reliability: Callable[[Figures], None]
) -> None:
    """Replaced by a text file, by another application's database, or cut in half while
    serving: 503 with the reason; the pages come back with the real log."""
    db = fixture_copy(tmp_path)
    good = db.read_bytes()
    other = tmp_path / "other.db"
    with closing(sqlite3.connect(other)) as conn, conn:
        conn.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, body TEXT)")
    swaps = {
        "a text file": (b"not a database\n", "is not a statemachine event log"),
        "another application's database": (other.read_bytes(),
                                           "is not a statemachine event log"),
        "the first half of the log": (good[: len(good) // 2], "malformed"),
    }
    with serving(db) as served:
        for what, (content, reason) in swaps.items():
            swapped = db.with_suffix(".swap")
            swapped.write_bytes(content)
            os.replace(swapped, db)
            try:
                assert_unavailable(served.port, reason)
            except AssertionError as exc:
                raise AssertionError(f"log replaced by {what}: {exc}") from exc
            restored = db.with_suffix(".back")
            restored.write_bytes(good)
            os.replace(restored, db)
            assert_served(served.port)
    reliability(Figures(
        scenario="Serve: the log swapped while serving",
        injected="the file replaced (rename over it) by a text file, another application's "
                 "database, its own first half; then the real log put back "
                 "(test_serve_faults.py)",
        times=len(swaps), events_written=events_in(db), events_lost=0, duplicates=0,
        verify="503 with the one-line reason on every page and the poll each time; 200 again "
               "with the real log",
    ))


# ------------------------------------------------------------------ what held, kept

def listening_addresses(port: int) -> set[str]:
    """The local addresses with a socket listening on ``port`` (Linux: /proc/net/tcp*)."""
    found = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        with open(table, encoding="ascii") as f:
            next(f)
            for row in f:
                local, state = row.split()[1], row.split()[3]
                address, hex_port = local.split(":")
                if int(hex_port, 16) == port and state == "0A" and len(address) == width:
                    raw = bytes.fromhex(address)
                    if width == 8:
                        found.add(socket.inet_ntop(socket.AF_INET, raw[::-1]))
                    else:
                        words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
                        found.add(socket.inet_ntop(socket.AF_INET6, words))
    return found


def test_serve_listens_on_127_0_0_1_only_by_default(tmp_path: Path) -> None:
    if not os.path.exists("/proc/net/tcp"):
        pytest.skip("reads the listening sockets from /proc/net/tcp (Linux)")
    with serving(fixture_copy(tmp_path)) as served:
        assert served.url.startswith(f"http://127.0.0.1:{served.port}/")
        assert listening_addresses(served.port) == {"127.0.0.1"}


XSS = "<script>alert(1)</script>\"'><img src=x onerror=alert(2)><svg onload=alert(3)>&amp;"


def test_markup_in_every_field_is_escaped_on_every_page(
    tmp_path: Path, reliability: Callable[[Figures], None]
) -> None:
    """Markup in the experiment name, trial id, config, error type and message, checkpoint,
    host name, and in the log's own path: every page (the index, the experiment, the trial,
    a 404 naming it, the 503 naming the path) shows it as text."""
    in_path = XSS.replace("/", "_")  # a folder name holds no "/"
    folder = tmp_path / f"dir{in_path}"
    folder.mkdir()
    db = folder / "statemachine.db"
    experiment, trial = f"exp{XSS}", f"trial{XSS}"
    written = record_hostile(f"sqlite:///{db}", experiment, trial, f"boom {XSS}", f"/ck/{XSS}")
    pages = ["/", f"/e/{quote(experiment, safe='')}",
             f"/e/{quote(experiment, safe='')}/t/{quote(trial, safe='')}",
             f"/e/{quote(experiment, safe='')}/t/{quote(trial + 'x', safe='')}",
             f"/e/{quote(XSS, safe='')}"]
    with serving(db) as served:
        for path in pages:
            answer = request(served.port, path)
            assert answer.status in (200, 404), (path, answer.status)
            assert XSS not in answer.body, path
            shown = XSS if answer.status == 200 else "<script>alert(1)</script>"  # 404: repr
            assert html.escape(shown, quote=True) in answer.body, path
            assert_no_markup_from_the_log(answer.body, path)
        shutil.move(db, tmp_path / "away.db")
        answer = request(served.port, "/")
        assert answer.status == 503
        assert in_path not in answer.body and html.escape(in_path, quote=True) in answer.body
        assert_no_markup_from_the_log(answer.body, "503")
    reliability(Figures(
        scenario="Serve: markup in every field",
        injected="a script element, an image with onerror, an SVG with onload, quotes and "
                 "an entity in the experiment name, trial id, config, error type and message, "
                 "checkpoint, "
                 "host name and the log's folder; every page, a 404 and a 503 "
                 "(test_serve_faults.py)",
        times=len(pages) + 1, events_written=written, events_lost=0, duplicates=0,
        verify="ok; shown escaped, no element or event handler from the log, no inline "
               "script",
    ))


def test_path_traversal_is_a_404(tmp_path: Path) -> None:
    """Paths that climb out of the pages or the static assets: 404, no file's content."""
    db = fixture_copy(tmp_path)
    with serving(db) as served:
        for path in ("/../../../../etc/passwd", "/static/../../../../../etc/passwd",
                     "/static/..%2f..%2f..%2f..%2f..%2fetc%2fpasswd",
                     "/static/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
                     "/static/%2e%2e/__init__.py", "/static/..%2fpages.py",
                     "/static//etc/passwd", "/static/%2Fetc%2Fpasswd",
                     "/e/..%2F..%2F..%2Fetc%2Fpasswd", "/%2e%2e/%2e%2e/etc/passwd",
                     f"/e/{EXP}/t/..%2F..%2Fsetup.cfg", "/api/../../etc/passwd"):
            answer = request(served.port, path)
            assert answer.status == 404, (path, answer.status)
            assert "root:" not in answer.body and "import " not in answer.body, path


def test_methods_other_than_get_are_refused(tmp_path: Path) -> None:
    """POST, PUT, DELETE, PATCH, OPTIONS, TRACE on every route: 405 naming GET, nothing
    read or written; HEAD answers like GET without a body."""
    db = fixture_copy(tmp_path)
    before = folder_state(db.parent)
    with serving(db) as served:
        for path in ("/", f"/e/{EXP}", f"/e/{EXP}/t/c_given_up", "/api/version",
                     "/static/live.js"):
            for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE"):
                answer = request(served.port, path, method=method)
                assert answer.status == 405, (method, path, answer.status)
                assert "GET" in answer.headers.get("allow", ""), (method, path)
                assert "c_given_up" not in answer.body
            head = request(served.port, path, method="HEAD")
            assert head.status == 200 and head.body == "", path
    assert folder_state(db.parent) == before
