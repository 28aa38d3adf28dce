"""The HTML every page of ``trial-replay serve`` is made of: escaping, links, the page shell.

Every text that comes from the log (experiment and trial names, error messages) goes
through :func:`e` (HTML-escaped, control characters made visible) and every name in a link
through :func:`q` (URL-quoted). Pages hold no inline script or style: the
Content-Security-Policy allows this server's own files only (``static/``).
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from statemachine.cli.provenance import reconstructed_note
from statemachine.cli.safe_text import xml_safe

if TYPE_CHECKING:
    from statemachine.log.records import SessionInfo

__all__ = ["POLL_SECONDS", "STATIC_PATH", "e", "experiment_href", "page", "q", "reconstructed",
           "table", "trial_href"]

#: How often a page asks whether the log changed.
POLL_SECONDS = 2.0
#: Where the package's static files (script, style) are served.
STATIC_PATH = "/static"


def e(value: Any) -> str:
    """``value`` as HTML text, as the terminal shows it: control characters and lone
    surrogates as visible escapes (a surrogate cannot be sent as UTF-8)."""
    return html.escape(xml_safe(value), quote=True)


def q(value: str) -> str:
    """A name as one path segment of a link (``/`` too is quoted)."""
    return quote(value, safe="")


def experiment_href(experiment: str) -> str:
    """The experiment's page."""
    return f"/e/{q(experiment)}"


def trial_href(experiment: str, trial_id: str) -> str:
    """The trial's page."""
    return f"/e/{q(experiment)}/t/{q(trial_id)}"


def reconstructed(sessions: Iterable[SessionInfo], epochs: Iterable[int] | None = None) -> str:
    """The paragraph saying the history shown was reconstructed from Ray's files (or "")."""
    note = reconstructed_note(sessions, epochs)
    return f'<p class="reconstructed">{e(note)}</p>' if note else ""


def table(headers: Iterable[str], rows: Iterable[Iterable[str]], *, css: str = "",
          body_id: str = "") -> str:
    """A table of cells already in HTML (``headers`` are plain text)."""
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>"
                   for row in rows)
    klass = f' class="{css}"' if css else ""
    tbody = f'<tbody id="{body_id}">' if body_id else "<tbody>"
    return f"<table{klass}><thead><tr>{head}</tr></thead>{tbody}{body}</tbody></table>"


def page(title: str, body: str, *, state: str = "ok", scripts: Iterable[str] = ("live.js",),
         data: dict[str, str] | None = None) -> str:
    """A whole page: ``body`` (HTML) in the shell with the style and ``scripts`` (files of
    ``static/``); ``data``: ``data-*`` attributes of ``<main>`` for the scripts."""
    tags = "".join(
        f'<script src="{STATIC_PATH}/{name}" data-poll-ms="{int(POLL_SECONDS * 1000)}" defer>'
        "</script>\n" for name in (*scripts, "timeline.js"))
    attrs = "".join(f' data-{name}="{e(value)}"' for name, value in (data or {}).items())
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="{STATIC_PATH}/favicon.svg" type="image/svg+xml">
<title>{e(title)}</title>
<link rel="stylesheet" href="{STATIC_PATH}/serve.css">
{tags}</head>
<body data-state="{state}">
<main{attrs}>
{body}
<p class="live" id="live">Live: this page follows the event log.</p>
</main>
</body>
</html>
"""
