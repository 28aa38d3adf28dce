"""``trial-replay timeline EXP -o FILE``: the experiment as a picture, one row per trial."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from statemachine.cli.db import BadInput, open_store
from statemachine.cli.output import Output, json_option
from statemachine.cli.reading import fold_states, require_experiment, session_ends, session_kinds
from statemachine.cli.schema import trial_row
from statemachine.cli.timeline import FORMATS, TimelineModel, build_model
from statemachine.distribution import install_hint


@click.command("timeline")
@click.argument("experiment", required=False)
@click.option("-o", "--output", "path", required=True, type=click.Path(dir_okay=False,
              path_type=Path), help="FILE.html, FILE.svg or FILE.png.")
@click.option("--order", "by_order", is_flag=True,
              help="x axis: the event order (one step per event) instead of time.")
@json_option
@click.pass_obj
def timeline(
    out: Output, experiment: str | None, path: Path, by_order: bool, as_json: bool
) -> int:
    """Draw the experiment: one row per trial, coloured spans per status, a marker for each
    typed failure (shape) and decision (colour), a line at each new driver epoch and a grey
    band where a crashed driver was down. The x axis is time since the first event (a crash
    gap shows), or with --order the event order. HTML and SVG fit the window; the HTML page
    zooms into a time range (one file, it works offline)."""
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
        model = build_model(experiment, store.read_experiment(experiment),
                            session_kinds(sessions), session_ends(sessions))
        summary = [trial_row(s) for s in fold_states(store, experiment, out)]
    model.by_time = not by_order
    try:
        write_timeline(model, path, summary)
    except OSError as exc:  # a read-only folder, /proc, a full disk: bad input, one line
        raise BadInput(f"cannot write the timeline to {path}: "
                       f"{exc.strerror or exc.__class__.__name__}") from None
    if as_json:
        out.json({"file": str(path), "format": fmt, "experiment": experiment,
                  "trials": [row.trial_id for row in model.rows], "events": model.n_events})
    else:
        out.text(f"Wrote {path} ({len(model.rows)} trials, {model.n_events} events)")
    return out.exit_code


def write_timeline(model: TimelineModel, path: Path,
                   summary_rows: Sequence[dict[str, Any]] = ()) -> Path:
    """Write the picture in the format ``path``'s suffix names."""
    fmt = path.suffix.lower().lstrip(".")
    if fmt == "svg":
        from statemachine.cli.timeline_svg import render_svg

        path.write_text(render_svg(model), encoding="utf-8")
    elif fmt == "html":
        from statemachine.cli.timeline_svg import render_html

        path.write_text(render_html(model, summary_rows), encoding="utf-8")
    elif fmt == "png":
        from statemachine.cli.timeline_png import render_png

        render_png(model, path)
    else:
        raise ValueError(f"unsupported timeline format {fmt!r}")
    return path
