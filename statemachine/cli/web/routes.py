"""The routes of ``trial-replay serve``: which path answers what, and how a failure answers.

=========================================  =================================================
``GET /``                                  the experiments (HTML)
``GET /e/{experiment}?{listing}``          counts, a page of trials, a bounded timeline (HTML)
``GET /e/{experiment}/t/{trial}``          one trial's timeline, failures, attempts (HTML)
``GET /e/{experiment}/nodes``              machines and their node ids (HTML)
``GET /api/e/{experiment}/trials?{...}``   a page of trials, counts and the page's fragments
``GET /api/e/{experiment}/changes?since=``  the trials changed after a position (JSON)
``GET /api/e/{experiment}/t/{trial}``      one trial's explanation (JSON, as ``explain``)
``GET /api/e/{experiment}/nodes``          machines and their node ids (JSON)
``GET /api/version``                       ``{"version": ...}``, changes with the log (JSON)
``GET /static/{file}``                     the package's script and style (``static/``)
=========================================  =================================================

``{listing}``: ``status``, ``error``, ``node``, ``restore``, ``q``, ``sort``, ``desc``,
``page`` (:mod:`~statemachine.cli.web.listing`); a value the table cannot take is 400.

Names in paths are percent-encoded by the pages' links (a name may hold ``/``), so they are
read from the raw path (:func:`path_segments`), one segment per name.

Every page and JSON answer is built in a worker thread (the log is read with blocking
drivers), each with its own read-only connection: requests are answered concurrently, and a
slow page holds up nothing but itself. Page builds share :data:`PAGE_BUILDS` threads (a page
of a big log holds its rows in memory); JSON answers have their own.

How a failure answers, for pages (HTML) and JSON (``{"error": "..."}``) alike:

- :class:`~statemachine.cli.web.pages.NotFound` (no such experiment or trial, no such path,
  also the store's own ``UnknownExperimentError``/``UnknownTrialError``): 404;
- :class:`~statemachine.exceptions.StateMachineError` (the log missing, replaced by something
  that is not an event log, corrupted, newer than this code, its server unreachable): 503
  with the one-line reason, said once on stderr until the log can be read again;
- :class:`~statemachine.cli.web.listing.BadQuery` (a parameter the table cannot take): 400;
- anything else is a bug: 500, and the traceback on stderr.

To add a page: a method of :class:`~statemachine.cli.web.pages.Pages` and a line in
:func:`routes` through :func:`html_endpoint`; a JSON endpoint: a function returning
JSON-safe data, through :func:`json_endpoint`; a static file: a file in ``static/`` (and its
name in ``setup.cfg``'s package data if it is a new kind).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_to_bytes

import anyio
import anyio.to_thread
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from statemachine.cli.safe_text import one_line
from statemachine.cli.web.pages import STATIC_PATH, BadQuery, NotFound, Pages, error_page
from statemachine.exceptions import (
    StateMachineError,
    UnknownExperimentError,
    UnknownTrialError,
)

__all__ = ["PAGE_BUILDS", "Asked", "Availability", "build_app", "html_endpoint", "json_endpoint",
           "path_segments", "routes"]

#: How many pages are built at once (more wait for a thread; JSON answers do not).
PAGE_BUILDS = 4
#: A name the log does not hold (also when it went between the page's check and its read).
_NOT_FOUND = (NotFound, UnknownExperimentError, UnknownTrialError)

Segments = list[str]
Endpoint = Callable[[Request], Any]


@dataclass(frozen=True)
class Asked:
    """What a request asks: its path's segments and its query parameters."""

    segments: Segments
    params: Mapping[str, str]


def path_segments(request: Request) -> Segments:
    """The request path's segments, each percent-decoded on its own (``a%2Fb`` is one)."""
    raw = request.scope.get("raw_path") or request.url.path.encode("utf-8")
    path = bytes(raw).split(b"?", 1)[0]
    return [unquote_to_bytes(part).decode("utf-8", "replace")
            for part in path.split(b"/") if part]


class Availability:
    """Whether the log could be read on the last request: says on stderr, once, when it
    cannot (and why) and when it can again. Used from the event loop's thread only."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.reason: str | None = None

    def failed(self, reason: str) -> None:
        """The log could not be read, for ``reason`` (one line)."""
        if reason != self.reason:
            self.reason = reason
            self.say(f"trial-replay: warning: the event log cannot be read: {reason}; the "
                     "pages answer 503 until it can")

    def succeeded(self) -> None:
        """The log was read."""
        if self.reason is not None:
            self.reason = None
            self.say("trial-replay: the event log is readable again")


class _App:
    """What every endpoint shares: the pages, the page-build threads, the availability."""

    def __init__(self, pages: Pages, availability: Availability) -> None:
        self.pages = pages
        self.availability = availability
        self.page_builds = anyio.CapacityLimiter(PAGE_BUILDS)

    async def build(self, build: Callable[[Pages, Asked], Any], asked: Asked,
                    limiter: anyio.CapacityLimiter | None) -> Any:
        result = await anyio.to_thread.run_sync(build, self.pages, asked, limiter=limiter)
        self.availability.succeeded()
        return result

    def unavailable(self, exc: StateMachineError) -> str:
        reason = one_line(exc)
        self.availability.failed(reason)
        return reason


def _asked(request: Request) -> Asked:
    return Asked(path_segments(request), dict(request.query_params))


def html_endpoint(app: _App, build: Callable[[Pages, Asked], str]) -> Endpoint:
    """An endpoint answering the page ``build(pages, what the request asks)`` returns."""

    async def endpoint(request: Request) -> Response:
        try:
            page = await app.build(build, _asked(request), app.page_builds)
        except _NOT_FOUND as exc:
            return HTMLResponse(error_page("not found", str(exc)), status_code=404)
        except BadQuery as exc:
            return HTMLResponse(error_page("bad address", str(exc)), status_code=400)
        except StateMachineError as exc:
            reason = app.unavailable(exc)
            return HTMLResponse(error_page("event log unavailable", reason, unavailable=True),
                                status_code=503, headers={"Retry-After": "2"})
        return HTMLResponse(page)

    return endpoint


def json_endpoint(app: _App, build: Callable[[Pages, Asked], Any]) -> Endpoint:
    """An endpoint answering ``build(pages, what the request asks)`` (JSON-safe) as JSON."""

    async def endpoint(request: Request) -> Response:
        try:
            data = await app.build(build, _asked(request), None)
        except _NOT_FOUND as exc:
            return JSONResponse({"error": one_line(exc)}, status_code=404)
        except BadQuery as exc:
            return JSONResponse({"error": one_line(exc)}, status_code=400)
        except StateMachineError as exc:
            return JSONResponse({"error": app.unavailable(exc)}, status_code=503,
                                headers={"Retry-After": "2"})
        return JSONResponse(data)

    return endpoint


def _index(pages: Pages, asked: Asked) -> str:
    return pages.index()


def _experiment_or_trial(pages: Pages, asked: Asked) -> str:
    segments = asked.segments
    if len(segments) == 2:  # e/{experiment}
        return pages.experiment(segments[1], asked.params)
    if len(segments) == 3 and segments[2] == "nodes":  # e/{experiment}/nodes
        return pages.nodes(segments[1])
    if len(segments) == 4 and segments[2] == "t":  # e/{experiment}/t/{trial}
        return pages.trial(segments[1], segments[3])
    raise NotFound(f"no page at /{'/'.join(segments)}")


def _api_experiment(pages: Pages, asked: Asked) -> Any:
    segments = asked.segments  # api/e/{experiment}/...
    if len(segments) == 4 and segments[3] == "trials":
        return pages.api_trials(segments[2], asked.params)
    if len(segments) == 4 and segments[3] == "changes":
        return pages.api_changes(segments[2], asked.params)
    if len(segments) == 4 and segments[3] == "nodes":
        return pages.api_nodes(segments[2])
    if len(segments) == 5 and segments[3] == "t":
        return pages.api_trial(segments[2], segments[4])
    raise NotFound(f"no answer at /{'/'.join(segments)}")


def _version(pages: Pages, asked: Asked) -> dict[str, str]:
    return {"version": pages.version()}


def routes(app: _App) -> list[BaseRoute]:
    """Every route of the server (see the table above)."""
    return [
        Route("/", html_endpoint(app, _index)),
        Route("/e/{names:path}", html_endpoint(app, _experiment_or_trial)),
        Route("/api/version", json_endpoint(app, _version)),
        Route("/api/e/{names:path}", json_endpoint(app, _api_experiment)),
        Mount(STATIC_PATH, app=StaticFiles(packages=[("statemachine.cli.web", "static")])),
    ]


async def _no_page(request: Request, exc: Exception) -> Response:
    """404 for a path no route (or static file) takes: a page, or JSON under ``/api/``."""
    message = one_line(f"no page at {request.url.path}")
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": message}, status_code=404)
    return HTMLResponse(error_page("not found", message), status_code=404)


def build_app(pages: Pages, say: Callable[[str], None]) -> Starlette:
    """The application serving ``pages``; ``say`` prints a line on stderr (availability)."""
    app = _App(pages, Availability(say))
    return Starlette(routes=routes(app), exception_handlers={404: _no_page})
