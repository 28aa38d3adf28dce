"""The HTML of ``trial-replay serve``: the experiments, each one's timeline and trials, and
each trial's ``explain``.

Each page is built from the log as it is now (``open_store`` opens it read-only, once per
page). Every page loads ``static/live.js``, which asks ``/api/version`` every
:data:`POLL_SECONDS` seconds and reloads the page when the log has new events (or a driver
session started or ended): the ``tail -f`` of the browser.

Every text that comes from the log (experiment and trial names, error messages) is escaped
for HTML; names in links are URL-quoted. Pages hold no inline script or style.
"""

from __future__ import annotations

import hashlib
import html
import json
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from statemachine.cli.explain import describe_policy, explain_trial
from statemachine.cli.provenance import reconstructed_note
from statemachine.cli.reading import (
    decode_trial,
    describe_sessions,
    fold_states,
    session_ends,
    session_kinds,
)
from statemachine.cli.safe_text import xml_safe
from statemachine.cli.schema import trial_row
from statemachine.cli.timeline import build_model
from statemachine.cli.timeline_svg import render_svg

if TYPE_CHECKING:
    from statemachine.cli.output import Output
    from statemachine.log import EventStore
    from statemachine.log.records import SessionInfo

__all__ = ["POLL_SECONDS", "STATIC_PATH", "NotFound", "Pages", "error_page"]

#: How often a page asks whether the log changed.
POLL_SECONDS = 2.0
#: Where the package's static files (script, style) are served.
STATIC_PATH = "/static"

OpenStore = Callable[[], AbstractContextManager["EventStore"]]


def _e(value: Any) -> str:
    # Shown as the terminal shows it: control characters and lone surrogates as visible
    # escapes (a surrogate cannot be sent as UTF-8, XML-illegal characters break the page).
    return html.escape(xml_safe(value), quote=True)


def _q(value: str) -> str:
    return quote(value, safe="")


class NotFound(Exception):
    """A page for an experiment or trial the log does not hold."""


class Pages:
    """The pages, built from the log each time (``open_store`` opens it read-only)."""

    def __init__(self, open_store: OpenStore, out: Output) -> None:
        self.open_store = open_store
        self.out = out

    def version(self) -> str:
        """A short token that changes whenever the log gains an event or a session changes."""
        parts: list[Any] = []
        with self.open_store() as store:
            for info in store.list_experiments():
                sessions = [(s.epoch, s.ended_at is not None, s.clean_end)
                            for s in store.list_sessions(info.name)]
                parts.append([info.name, info.events, str(info.last_recorded_at), sessions])
        return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]

    def index(self) -> str:
        """Every experiment with its counts."""
        with self.open_store() as store:
            infos = store.list_experiments()
        rows = "".join(
            f'<tr><td><a href="/e/{_q(i.name)}">{_e(i.name)}</a></td><td>{i.trials}</td>'
            f"<td>{i.events}</td><td>{i.epoch}</td><td>{_e(i.last_recorded_at)}</td></tr>"
            for i in infos
        )
        body = (
            "<h1>Experiments</h1><table><thead><tr><th>experiment</th><th>trials</th>"
            "<th>events</th><th>driver epoch</th><th>last event</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>"
            if infos else "<h1>Experiments</h1><p>This event log holds no experiment yet.</p>"
        )
        return _page("trial-replay", body)

    def experiment(self, name: str) -> str:
        """The timeline of one experiment and its trials, each linked to its explanation."""
        with self.open_store() as store:
            if name not in {i.name for i in store.list_experiments()}:
                raise NotFound(f"no experiment named {name!r} in this event log")
            sessions = store.list_sessions(name)
            model = build_model(name, list[Any](store.read_experiment(name)),
                                session_kinds(sessions), session_ends(sessions))
            rows = [trial_row(s) for s in fold_states(store, name, self.out)]
        trials = "".join(
            f'<tr><td><a href="/e/{_q(name)}/t/{_q(r["trial_id"])}">{_e(r["trial_id"])}</a>'
            f'</td><td class="{_e(r["status"])}">{_e(r["status"])}</td>'
            f"<td>{r['num_failures']}</td>"
            f"<td>{r['num_restore_failures']}/{r['total_restore_failures']}</td>"
            f"<td>{r['num_preemptions']}</td><td>{_e(r['last_error_type'])}</td>"
            f"<td>{_e(r['last_error_message'])}</td><td>{_e(r['last_decision'])}</td></tr>"
            for r in rows
        )
        epochs = _e(describe_sessions(sessions))
        svg = render_svg(model).split("?>", 1)[-1]
        body = (
            f'<nav><a href="/">experiments</a></nav><h1>{_e(name)}</h1>'
            f"<p>Driver sessions: {epochs or 'none'}</p>{_reconstructed(sessions)}{svg}"
            "<h2>Trials</h2><table><thead><tr><th>trial</th><th>status</th><th>failures</th>"
            "<th>restore fails (episode/total)</th><th>preemptions</th><th>last error</th>"
            "<th>message</th><th>last decision</th></tr></thead>"
            f"<tbody>{trials}</tbody></table>"
        )
        return _page(f"trial-replay: {name}", body)

    def trial(self, name: str, trial_id: str) -> str:
        """The explanation of one trial (as ``trial-replay explain``)."""
        with self.open_store() as store:
            if name not in {i.name for i in store.list_experiments()}:
                raise NotFound(f"no experiment named {name!r} in this event log")
            if trial_id not in store.list_trials(name):
                raise NotFound(f"experiment {name!r} has no trial {trial_id!r}")
            decoded = decode_trial(store.read_trial(name, trial_id), self.out)
            sessions = store.list_sessions(name)
        note = _reconstructed(sessions, {stored.epoch for stored, _ in decoded})
        explanation = explain_trial(trial_id, list[Any](decoded), session_ends(sessions),
                                    session_kinds(sessions))
        steps = "".join(
            "<tr><td>"
            + (f"seq {step.seq}" if step.seq is not None else "")
            + (f" epoch {step.epoch}" if step.epoch is not None else "")
            + f"</td><td>{_e(step.decision)}</td><td>{_e(step.text)}</td></tr>"
            for step in explanation.steps
        )
        body = (
            f'<nav><a href="/">experiments</a> / <a href="/e/{_q(name)}">{_e(name)}</a></nav>'
            f"<h1>Trial {_e(trial_id)}</h1>"
            f'<p class="summary">{_e(explanation.summary)}</p>{note}'
            f"<p>Policy that applied: {_e(describe_policy(explanation.state.policy))}.</p>"
            '<table class="steps"><thead><tr><th>where</th><th>decision</th><th>what happened'
            f"</th></tr></thead><tbody>{steps}</tbody></table>"
        )
        return _page(f"trial-replay: {name} / {trial_id}", body)


def _reconstructed(sessions: Iterable[SessionInfo], epochs: Iterable[int] | None = None) -> str:
    """The paragraph saying the history shown was reconstructed from Ray's files (or "")."""
    note = reconstructed_note(sessions, epochs)
    return f'<p class="reconstructed">{_e(note)}</p>' if note else ""


def _page(title: str, body: str, *, state: str = "ok") -> str:
    # No inline script or style (the Content-Security-Policy allows this server's files only):
    # the look and the live reload are static files of the package (static/).
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<link rel="icon" href="{STATIC_PATH}/favicon.svg" type="image/svg+xml">
<title>{_e(title)}</title>
<link rel="stylesheet" href="{STATIC_PATH}/serve.css">
<script src="{STATIC_PATH}/live.js" data-poll-ms="{int(POLL_SECONDS * 1000)}" defer></script>
<script src="{STATIC_PATH}/timeline.js" defer></script>
</head>
<body data-state="{state}">
<main>
{body}
<p class="live" id="live">Live: this page reloads when the event log changes.</p>
</main>
</body>
</html>
"""


def error_page(title: str, message: str, *, unavailable: bool = False) -> str:
    """A page saying one thing (a page not found, the log unavailable), the text escaped.

    ``unavailable``: the log could not be read; the page reloads once it can.
    """
    return _page(title, f"<p>{_e(message)}</p>", state="unavailable" if unavailable else "ok")
