"""``trial-replay diagram -o FILE``: the state machine, drawn from the ``transitions`` Machine."""

from __future__ import annotations

from pathlib import Path

import click

from statemachine.cli.db import BadInput
from statemachine.cli.diagram import FORMATS, DotMissingError, write_diagram
from statemachine.cli.output import Output, json_option

INSTALL_HINT = (
    "install Graphviz (Debian/Ubuntu: apt-get install graphviz; macOS: brew install graphviz)"
)


@click.command("diagram")
@click.option("-o", "--output", "path", required=True, type=click.Path(dir_okay=False,
              path_type=Path), help="FILE.svg, FILE.png or FILE.dot.")
@json_option
@click.pass_obj
def diagram(out: Output, path: Path, as_json: bool) -> int:
    """Draw the trial state machine (states, triggers, guards in order, decisions) from the
    ``transitions`` definition itself. ``.dot`` needs nothing; ``.svg``/``.png`` need
    Graphviz's ``dot``: without it the ``.dot`` source is written and the command says how
    to install Graphviz."""
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise BadInput(f"diagram output must end in .svg, .png or .dot, got {path.name!r}")
    if not path.parent.is_dir():
        raise BadInput(f"no such folder for the diagram: {path.parent}")
    try:
        written = write_diagram(path)
    except DotMissingError as exc:
        raise BadInput(
            f"Graphviz's 'dot' program was not found, so {path.name} was not drawn; wrote the "
            f"Graphviz source to {exc.dot_file} instead. To draw it, {INSTALL_HINT}, then rerun "
            f"or run: dot -T{fmt} {exc.dot_file} -o {path}"
        ) from None
    if as_json:
        out.json({"file": str(written), "format": fmt})
    else:
        out.text(f"Wrote {written}")
    return out.exit_code
