"""``trial-replay timeline EXP -o FILE``: the experiment as a picture, one row per trial."""

from __future__ import annotations

from pathlib import Path

import click

from statemachine.cli.db import BadInput, open_store
from statemachine.cli.output import Output, json_option
from statemachine.cli.reading import fold_states, require_experiment, session_kinds
from statemachine.cli.schema import trial_row
from statemachine.cli.timeline import FORMATS, build_model, write_timeline
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
    typed failure (shape) and decision (colour), a line at each new driver epoch. The x axis
    is time since the first event (a crash gap shows), or with --order the event order."""
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
        model = build_model(experiment, store.read_experiment(experiment),
                            session_kinds(store.list_sessions(experiment)))
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
