"""``trial-replay timeline EXP -o FILE``: the experiment as a picture, one row per trial."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from statemachine.cli.db import BadInput, open_store
from statemachine.cli.output import Output, json_option
from statemachine.cli.reading import read_model, require_experiment, session_ends, session_kinds
from statemachine.cli.schema import summary_row
from statemachine.cli.timeline import FORMATS, Selection, TimelineModel, build_model
from statemachine.distribution import install_hint

#: The most trials a timeline draws by default. A row is 30 px of SVG: 300 rows make a
#: picture 9,000 px tall and an HTML file of about a megabyte at 20 events a trial, still
#: quick to open and scroll; past that a picture stops being read row by row (filter with
#: the web page, or ask for more with --trials).
TRIALS = 300
#: The largest --trials taken (a bigger number is a typo: 0 draws every trial).
MOST = 10_000_000


@click.command("timeline")
@click.argument("experiment", required=False)
@click.option("-o", "--output", "path", required=True, type=click.Path(dir_okay=False,
              path_type=Path), help="FILE.html, FILE.svg or FILE.png.")
@click.option("--order", "by_order", is_flag=True,
              help="x axis: the event order (one step per event) instead of time.")
@click.option("--trials", "limit", type=click.IntRange(min=0, max=MOST), default=TRIALS,
              show_default=True,
              help="Draw at most this many trials: the ones that failed first, then the "
                   "others in order of first appearance (0: every trial).")
@json_option
@click.pass_obj
def timeline(
    out: Output, experiment: str | None, path: Path, by_order: bool, limit: int,
    as_json: bool
) -> int:
    """Draw the experiment: one row per trial, coloured spans per status, a marker for each
    typed failure (shape) and decision (colour), a line at each new driver epoch and a grey
    band where a crashed driver was down. The x axis is time since the first event (a crash
    gap shows), or with --order the event order. HTML and SVG fit the window; the HTML page
    zooms into a time range (one file, it works offline).

    A big experiment draws --trials of its trials (the ones that failed first, then the
    others in order of first appearance) and says how many it left out; the HTML page adds
    a bar of every trial by status. --trials 0 draws every trial."""
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise BadInput(f"timeline output must end in .html, .svg or .png, got {path.name!r}")
    if not path.parent.is_dir():
        raise BadInput(f"no such folder for the timeline: {path.parent}")
    if fmt == "png":
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise BadInput(
                f"a PNG timeline needs matplotlib: {install_hint('plot')} "
                "(or write .html or .svg)"
            ) from None
    with open_store(out.db) as store:
        experiment = require_experiment(store, experiment)
        sessions = store.list_sessions(experiment)
        reads = read_model(store, out)
        select = Selection(limit or None,
                           tuple(reads.failed_first(experiment, limit or None)) if limit
                           else ())
        # One pass over the events, in pages: only the drawn trials' rows are kept.
        model = build_model(experiment, store.read_experiment(experiment),
                            session_kinds(sessions), session_ends(sessions), select)
        found = {t.trial_id: t for t in reads.summaries(
            experiment, [row.trial_id for row in model.rows])}
        summary = [summary_row(found[row.trial_id]) for row in model.rows
                   if row.trial_id in found]
        counts = reads.status_counts(experiment) if model.left_out else None
    model.by_time = not by_order
    try:
        write_timeline(model, path, summary, counts)
    except OSError as exc:  # a read-only folder, /proc, a full disk: bad input, one line
        raise BadInput(f"cannot write the timeline to {path}: "
                       f"{exc.strerror or exc.__class__.__name__}") from None
    if as_json:
        found_json: dict[str, Any] = {
            "file": str(path), "format": fmt, "experiment": experiment,
            "trials": [row.trial_id for row in model.rows], "events": model.n_events}
        if model.left_out:  # only then: the output of a whole picture is as it was
            found_json.update(trials_total=model.n_trials, left_out=model.left_out,
                              failed_drawn=model.failed_drawn, note=model.drawn_note)
        out.json(found_json)
    elif model.left_out:
        out.text(f"Wrote {path} ({model.drawn_note}; {model.n_events} events)")
    else:
        out.text(f"Wrote {path} ({len(model.rows)} trials, {model.n_events} events)")
    return out.exit_code


def write_timeline(model: TimelineModel, path: Path,
                   summary_rows: Sequence[dict[str, Any]] = (),
                   counts: Mapping[str, int] | None = None) -> Path:
    """Write the picture in the format ``path``'s suffix names (``counts``: every trial by
    status, the HTML page's overview bar when trials are left out)."""
    fmt = path.suffix.lower().lstrip(".")
    if fmt == "svg":
        from statemachine.cli.timeline_svg import render_svg

        path.write_text(render_svg(model), encoding="utf-8")
    elif fmt == "html":
        from statemachine.cli.timeline_svg import render_html

        path.write_text(render_html(model, summary_rows, counts), encoding="utf-8")
    elif fmt == "png":
        from statemachine.cli.timeline_png import render_png

        render_png(model, path)
    else:
        raise ValueError(f"unsupported timeline format {fmt!r}")
    return path
