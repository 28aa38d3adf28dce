"""The experiment page of ``trial-replay serve``: status counts, the trial table (filtered,
sorted and paginated on the server: :mod:`~statemachine.cli.web.listing`), the timeline of
a bounded number of trials and an overview bar of all of them.

The page stays small whatever the experiment's size: one page of :data:`PAGE_SIZE` rows, a
timeline of at most :data:`TIMELINE_TRIALS` trials (the first of the table's page: filter
on ``ERROR`` and sort by failures to draw the worst), and counts. ``static/table.js`` then
asks ``/api/e/EXP/trials`` for other pages, filters and sorts, and
``/api/e/EXP/changes?since=POSITION`` for what changed, patching the table in place (no
reload: the scroll position stays). The table's cells are built the same way here and there
(``static/table.js`` mirrors :func:`trial_cells` from :func:`api_row`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from statemachine.cli.reading import describe_sessions, session_ends, session_kinds
from statemachine.cli.schema import STATUSES
from statemachine.cli.timeline import build_model
from statemachine.cli.timeline_svg import overview, render_svg
from statemachine.cli.web.markup import e, experiment_href, q, reconstructed, trial_href
from statemachine.cli.web.trial_query import ERROR_TYPES, PAGE_SIZE

if TYPE_CHECKING:
    from statemachine.cli.web.listing import Listing
    from statemachine.cli.web.trial_query import Page, TrialQuery
    from statemachine.log import EventStore
    from statemachine.log.records import SessionInfo

__all__ = ["COLUMNS", "TIMELINE_TRIALS", "api_row", "counts_html", "experiment_body",
           "overview", "timeline_html", "trial_cells", "trial_table"]

#: The most trials the experiment page's timeline draws.
TIMELINE_TRIALS = 20

#: The table's columns: header, and the sort (a key of SORTS) its header link asks for.
COLUMNS: tuple[tuple[str, str | None], ...] = (
    ("trial", "trial"), ("status", "status"), ("failures", "failures"),
    ("restore failures (this episode / in all)", "restore_failures"),
    ("preemptions", "preemptions"), ("last error", None), ("message", None),
    ("last decision", None), ("last failure on", None),
)


def _node_text(node: dict[str, Any] | None) -> str:
    if not node:
        return ""
    return str(node.get("node_ip") or node.get("hostname") or node.get("node_id") or "")


def api_row(experiment: str, row: dict[str, Any]) -> dict[str, Any]:
    """A row of ``/api/e/EXP/trials``: the ``trials`` schema, its page's address and the
    node of its last failure as the table shows it."""
    return {**row, "href": trial_href(experiment, row["trial_id"]),
            "last_failure_on": _node_text(row.get("last_failure_node"))}


def trial_cells(experiment: str, row: dict[str, Any]) -> list[str]:
    """The table's cells of one trial, in HTML (``static/table.js`` builds the same)."""
    r = api_row(experiment, row)
    return [
        f'<a href="{e(r["href"])}">{e(r["trial_id"])}</a>',
        f'<span class="{e(r["status"])}">{e(r["status"])}</span>',
        str(r["num_failures"]),
        f"{r['num_restore_failures']} / {r['total_restore_failures']}",
        str(r["num_preemptions"]),
        e(r["last_error_type"] or ""),
        e(r["last_error_message"] or ""),
        e(r["last_decision"] or ""),
        e(r["last_failure_on"]),
    ]


def counts_html(experiment: str, counts: dict[str, int], listing: Listing) -> str:
    total = sum(counts.values())
    base = experiment_href(experiment)
    links = [f'<a href="{base}{e(listing.query(status=None, page=1))}" data-status="" '
             f'class="count{" chosen" if listing.status is None else ""}">all '
             f'<b>{total:,}</b></a>']
    for status in STATUSES:
        chosen = " chosen" if listing.status == status else ""
        zero = " zero" if not counts.get(status) else ""
        links.append(
            f'<a href="{base}{e(listing.query(status=status, page=1))}" '
            f'data-status="{status}" class="count {status}{chosen}{zero}">{status} '
            f'<b>{counts.get(status, 0):,}</b></a>')
    return f'<nav class="counts" id="counts" aria-label="status counts">{"".join(links)}</nav>'


def _select(name: str, label: str, options: list[tuple[str, str]], chosen: str | None) -> str:
    opts = "".join(
        f'<option value="{e(value)}"{" selected" if (value or None) == chosen else ""}>'
        f"{e(text)}</option>" for value, text in options)
    return f'<label>{e(label)} <select name="{name}">{opts}</select></label>'


def _filters(experiment: str, listing: Listing) -> str:
    restore = None if listing.has_restore_failures is None else (
        "1" if listing.has_restore_failures else "0")
    return (
        '<form id="filters" class="filters" role="search">'
        + _select("status", "status", [("", "any")] + [(s, s) for s in STATUSES],
                  listing.status)
        + _select("error", "last error", [("", "any")] + [(t, t) for t in ERROR_TYPES],
                  listing.error_type)
        + _select("restore", "restore failures", [("", "any"), ("1", "some"), ("0", "none")],
                  restore)
        + f'<label>last failure on node <input name="node" size="14" '
          f'value="{e(listing.node or "")}" placeholder="IP, host or id"></label>'
        + f'<label>trial name <input name="q" type="search" size="16" '
          f'value="{e(listing.search or "")}" placeholder="part of the id"></label>'
        + f'<input type="hidden" name="sort" value="{e(listing.sort)}">'
        + f'<input type="hidden" name="desc" value="{"1" if listing.descending else ""}">'
        + '<button type="submit">Filter</button> '
        + f'<a href="{experiment_href(experiment)}" class="clear">clear</a></form>'
    )


def _pager(experiment: str, listing: Listing, result: Page) -> str:
    pages = max(1, -(-result.total // PAGE_SIZE))
    first, last = result.offset + 1, result.offset + len(result.rows)
    shown = (f"Trials {first:,}-{last:,} of {result.total:,}" if result.rows
             else f"No trial on this page ({result.total:,} match)")
    if listing.filtered:
        shown += " matching the filter"
    base = experiment_href(experiment)

    def link(page: int, text: str, rel: str) -> str:
        if page < 1 or page > pages or page == listing.page:
            return f'<span class="off">{text}</span>'
        return f'<a href="{base}{e(listing.query(page=page))}" rel="{rel}" data-page="{page}">' \
               f"{text}</a>"

    links = (link(1, "&laquo; first", "first"), link(listing.page - 1, "&lsaquo; previous", "prev"),
             f'<span class="page-of">page {listing.page:,} of {pages:,}</span>',
             link(listing.page + 1, "next &rsaquo;", "next"), link(pages, "last &raquo;", "last"))
    return f'<div class="pager"><span class="showing">{shown}</span> {" ".join(links)}</div>'


def _header(experiment: str, listing: Listing) -> str:
    cells = []
    for text, sort in COLUMNS:
        if sort is None:
            cells.append(f"<th>{e(text)}</th>")
            continue
        mark = ""
        if listing.sort == sort:
            mark = " ▼" if listing.descending else " ▲"
        aria = ' aria-sort="descending"' if listing.sort == sort and listing.descending else (
            ' aria-sort="ascending"' if listing.sort == sort else "")
        cells.append(f'<th{aria}><a href="{experiment_href(experiment)}'
                     f'{e(listing.sorted_by(sort))}" data-sort="{sort}">{e(text)}{mark}</a></th>')
    return f"<thead><tr>{''.join(cells)}</tr></thead>"


def trial_table(experiment: str, listing: Listing, result: Page) -> str:
    """The table of one page of trials, with its pager."""
    rows = "".join(
        f'<tr data-trial-id="{e(r["trial_id"])}">'
        + "".join(f"<td>{c}</td>" for c in trial_cells(experiment, r)) + "</tr>"
        for r in result.rows)
    return (f'<div id="pager-top">{_pager(experiment, listing, result)}</div>'
            f'<table id="trials" class="trials">{_header(experiment, listing)}'
            f'<tbody id="trial-rows">{rows}</tbody></table>'
            f'<div id="pager-bottom">{_pager(experiment, listing, result)}</div>')


def timeline_html(store: EventStore, experiment: str, sessions: list[SessionInfo],
                  result: Page, counts: dict[str, int]) -> str:
    """The timeline of the first :data:`TIMELINE_TRIALS` trials of ``result`` (their
    events only), what it draws, and the overview bar of all trials."""
    drawn = [r["trial_id"] for r in result.rows[:TIMELINE_TRIALS]]
    total = sum(counts.values())
    events = sorted((ev for t in drawn for ev in store.read_trial(experiment, t)),
                    key=lambda ev: ev.position)
    if drawn:
        model = build_model(experiment, events, session_kinds(sessions), session_ends(sessions))
        svg = render_svg(model).split("?>", 1)[-1]
    else:
        svg = "<p>No trial to draw.</p>"
    if len(drawn) < result.total:
        what = (f"The timeline draws {len(drawn):,} of the {result.total:,} trials "
                + ("that match the filter" if result.total < total else "")
                + ": the first of the table's page below (filter and sort the table to "
                f"choose them). The bar counts all {total:,} trials by status.")
    elif len(drawn) < total:
        what = (f"The timeline draws the {len(drawn):,} trials of the table below. The bar "
                f"counts all {total:,} trials by status.")
    else:
        what = f"The timeline draws all {total:,} trials."
    return (f'<p class="timeline-note" id="timeline-note">{e(what)}</p>{overview(counts)}'
            f"{svg}")


def experiment_body(store: EventStore, query: TrialQuery, experiment: str,
                    listing: Listing) -> str:
    """The experiment page's body."""
    sessions = store.list_sessions(experiment)
    counts = query.status_counts(experiment)
    result = listing.fetch(query, experiment)
    timeline = timeline_html(store, experiment, sessions, result, counts)
    return (
        f'<nav><a href="/">experiments</a> / {e(experiment)} · '
        f'<a href="/e/{q(experiment)}/nodes">nodes</a></nav>'
        f"<h1>{e(experiment)}</h1>"
        f"<p>Driver sessions: {e(describe_sessions(sessions)) or 'none'}</p>"
        f"{reconstructed(sessions)}"
        f'<div id="status-counts">{counts_html(experiment, counts, listing)}</div>'
        f'<h2>Timeline</h2><div id="timeline">{timeline}</div>'
        f'<h2 id="trials-head">Trials</h2>'
        f"{_filters(experiment, listing)}"
        f'<div id="trial-table">{trial_table(experiment, listing, result)}</div>'
    )

