"""``trial-replay timeline EXP -o FILE``: the experiment as a picture, one row per trial."""

from __future__ import annotations

from pathlib import Path

import click

from statemachine.cli.db import BadInput, open_store
from statemachine.cli.output import Output, json_option
from statemachine.cli.reading import fold_states, require_experiment
from statemachine.cli.schema import trial_row
from statemachine.cli.timeline import FORMATS, build_model, write_timeline


@click.command("timeline")
@click.argument("experiment")
@click.option("-o", "--output", "path", required=True, type=click.Path(dir_okay=False,
              path_type=Path), help="FILE.html, FILE.svg or FILE.png.")
@json_option
@click.pass_obj
def timeline(out: Output, experiment: str, path: Path, as_json: bool) -> int:
    """Draw the experiment: one row per trial, coloured spans per status, a marker for each
    typed failure (shape) and decision (colour), a line at each new driver epoch."""
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
                "a PNG timeline needs matplotlib: pip install 'statemachine[plot]' "
                "(or write .html or .svg)"
            ) from None
    with open_store(out.db) as store:
        require_experiment(store, experiment)
        model = build_model(experiment, store.read_experiment(experiment))
        summary = [trial_row(s) for s in fold_states(store, experiment, out)]
    write_timeline(model, path, summary)
    if as_json:
        out.json({"file": str(path), "format": fmt, "experiment": experiment,
                  "trials": [row.trial_id for row in model.rows], "events": model.n_events})
    else:
        out.text(f"Wrote {path} ({len(model.rows)} trials, {model.n_events} events)")
    return out.exit_code
