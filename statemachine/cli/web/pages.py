"""The pages and JSON answers of ``trial-replay serve``, each built from the log as it is now
(``open_store`` opens it read-only, once per answer).

- ``/``: the experiments;
- ``/e/EXP``: status counts, the trial table a page at a time (filters, sort and page in the
  address: :mod:`~statemachine.cli.web.listing`), the timeline of a bounded number of trials
  and an overview of all (:mod:`~statemachine.cli.web.experiment_page`);
- ``/e/EXP/t/TRIAL``: the trial's timeline, failures, policy, attempts and explanation
  (:mod:`~statemachine.cli.web.trial_page`);
- ``/e/EXP/nodes``: machines and their node ids (:mod:`~statemachine.cli.web.nodes_page`);
- ``/api/...``: the same as JSON, and what changed since a position (live updates).

The experiment page's ``static/table.js`` asks ``/api/e/EXP/changes?since=POSITION`` every
:data:`POLL_SECONDS` seconds and patches the table in place; the other pages'
``static/live.js`` reloads them when :meth:`Pages.version` changes. What the pages read of
trial state goes through :class:`~statemachine.cli.web.trial_query.TrialQuery`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from statemachine.cli.reading import decode_trial
from statemachine.cli.web.experiment_page import (
    api_row,
    counts_html,
    experiment_body,
    timeline_html,
    trial_table,
)
from statemachine.cli.web.listing import BadQuery, parse_listing
from statemachine.cli.web.markup import POLL_SECONDS, STATIC_PATH, e, experiment_href, page
from statemachine.cli.web.nodes_page import nodes_body
from statemachine.cli.web.trial_page import trial_body
from statemachine.cli.web.trial_query import PAGE_SIZE, TrialQuery

if TYPE_CHECKING:
    from statemachine.cli.output import Output
    from statemachine.log import EventStore

__all__ = ["MOST_CHANGED", "POLL_SECONDS", "STATIC_PATH", "BadQuery", "NotFound", "Pages",
           "error_page"]

#: The most trial ids one answer of ``/api/e/EXP/changes`` lists (``more``: there were more).
MOST_CHANGED = 1000

OpenStore = Callable[[], AbstractContextManager["EventStore"]]
Params = Mapping[str, str]
#: No parameter: the default listing.
NO_PARAMS: Params = MappingProxyType({})


class NotFound(Exception):
    """A page for an experiment or trial the log does not hold."""


def _require(query: TrialQuery, name: str) -> None:
    if name not in query.experiments():
        raise NotFound(f"no experiment named {name!r} in this event log")


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
            f'<tr><td><a href="{experiment_href(i.name)}">{e(i.name)}</a></td>'
            f"<td>{i.trials:,}</td><td>{i.events:,}</td><td>{i.epoch}</td>"
            f"<td>{e(i.last_recorded_at)}</td></tr>"
            for i in infos
        )
        body = (
            "<h1>Experiments</h1><table><thead><tr><th>experiment</th><th>trials</th>"
            "<th>events</th><th>driver epoch</th><th>last event</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>"
            if infos else "<h1>Experiments</h1><p>This event log holds no experiment yet.</p>"
        )
        return page("trial-replay", body)

    def experiment(self, name: str, params: Params = NO_PARAMS) -> str:
        """The experiment's counts, a page of its trial table and a bounded timeline."""
        listing = parse_listing(params)
        with self.open_store() as store:
            query = TrialQuery(store, self.out)
            _require(query, name)
            # The position before the state: a change in between is fetched again, not lost.
            position = query.position(name)
            body = experiment_body(store, query, name, listing)
        return page(f"trial-replay: {name}", body, scripts=("table.js",), data={
            "experiment": name, "position": str(position), "page-size": str(PAGE_SIZE)})

    def trial(self, name: str, trial_id: str) -> str:
        """The trial's page."""
        body, _ = self._trial(name, trial_id)
        return page(f"trial-replay: {name} / {trial_id}", body)

    def _trial(self, name: str, trial_id: str) -> tuple[str, dict[str, Any]]:
        with self.open_store() as store:
            _require(TrialQuery(store, self.out), name)
            if trial_id not in store.list_trials(name):
                raise NotFound(f"experiment {name!r} has no trial {trial_id!r}")
            decoded = decode_trial(store.read_trial(name, trial_id), self.out)
            sessions = store.list_sessions(name)
        return trial_body(name, trial_id, decoded, sessions)

    def nodes(self, name: str) -> str:
        """The machines and node ids the experiment's trials ran on."""
        body, _ = self._nodes(name)
        return page(f"trial-replay: {name} / nodes", body)

    def _nodes(self, name: str) -> tuple[str, list[dict[str, Any]]]:
        with self.open_store() as store:
            query = TrialQuery(store, self.out)
            _require(query, name)
            return nodes_body(name, query.nodes(name))

    # ------------------------------------------------------------ JSON

    def api_trials(self, name: str, params: Params = NO_PARAMS) -> dict[str, Any]:
        """A page of the trial table as data, with the fragments the page swaps in."""
        listing = parse_listing(params)
        with self.open_store() as store:
            query = TrialQuery(store, self.out)
            _require(query, name)
            position = query.position(name)  # before the state, as on the page
            counts = query.status_counts(name)
            result = listing.fetch(query, name)
            fragments = {
                "counts": counts_html(name, counts, listing),
                "table": trial_table(name, listing, result),
                "timeline": timeline_html(store, name, store.list_sessions(name), result,
                                          counts),
            }
        return {
            "experiment": name, "position": position, "status_counts": counts,
            "total": result.total, "page": listing.page, "page_size": PAGE_SIZE,
            "pages": max(1, -(-result.total // PAGE_SIZE)), "query": listing.query(),
            "rows": [api_row(name, r) for r in result.rows], "html": fragments,
        }

    def api_changes(self, name: str, params: Params) -> dict[str, Any]:
        """The trials with an event after ``since`` (a position), and the position now."""
        text = params.get("since", "0").strip()
        if not text.isdigit() or len(text) > 19:
            raise BadQuery(f"parameter since={text[:40]!r} is not an event position (0, 1, ...)")
        with self.open_store() as store:
            query = TrialQuery(store, self.out)
            _require(query, name)
            changes = query.changed_since(name, int(text))
        return {"experiment": name, "since": int(text), "position": changes.position,
                "changed": changes.trial_ids[:MOST_CHANGED],
                "more": len(changes.trial_ids) > MOST_CHANGED}

    def api_trial(self, name: str, trial_id: str) -> dict[str, Any]:
        """The trial's explanation (schema ``explain``)."""
        return self._trial(name, trial_id)[1]

    def api_nodes(self, name: str) -> list[dict[str, Any]]:
        """The machines, worst first, each with its node ids."""
        return self._nodes(name)[1]


def error_page(title: str, message: str, *, unavailable: bool = False) -> str:
    """A page saying one thing (a page not found, the log unavailable), the text escaped.

    ``unavailable``: the log could not be read; the page reloads once it can.
    """
    return page(title, f"<p>{e(message)}</p>", state="unavailable" if unavailable else "ok")
