"""``trial-replay export EXP`` and ``trial-replay import FILE``: copy an experiment between
stores as JSON lines (e.g. a cluster's PostgreSQL log into a local SQLite file)."""

from __future__ import annotations

from pathlib import Path

import click

from statemachine.cli.db import BadInput, open_store, resolve_write_target
from statemachine.cli.output import Output, json_option
from statemachine.cli.reading import require_experiment
from statemachine.log import verify as verify_log
from statemachine.log.records import dump_json
from statemachine.log.transfer import export_records, read_export


@click.command("export")
@click.argument("experiment")
@click.option("-o", "--output", "path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write to FILE (default: stdout).")
@json_option
@click.pass_obj
def export(out: Output, experiment: str, path: Path | None, as_json: bool) -> int:
    """Export the experiment's sessions and events as JSON lines (compact, sorted keys).
    With -o and --json, print a summary object instead of nothing."""
    if path is not None and not path.parent.is_dir():
        raise BadInput(f"no such folder for the export: {path.parent}")
    with open_store(out.db) as store:
        require_experiment(store, experiment)
        records = list(export_records(store, experiment, out.warn))
    lines = [dump_json(r) for r in records]
    text = "".join(f"{ln}\n" for ln in lines)
    if path is None:
        click.echo(text, nl=False)
        return out.exit_code
    path.write_text(text, encoding="utf-8")
    events = sum(1 for r in records if r["kind"] == "event")
    if as_json:
        out.json({"experiment": experiment, "file": str(path), "lines": len(lines),
                  "events": events})
    else:
        out.text(f"Wrote {path}: {events} events of {experiment} ({len(lines)} lines)")
    return out.exit_code


@click.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--as", "name", metavar="NAME", help="Import under this experiment name.")
@json_option
@click.pass_obj
def import_(out: Output, file: Path, name: str | None, as_json: bool) -> int:
    """Import an export FILE into the --db store (created and migrated if needed: the one
    command that writes). Refuses an experiment name the store already has."""
    export_file = read_export(file)  # checked whole before anything is written
    target = resolve_write_target(out.db, "import")
    with open_store(target, create=True) as store:
        imported = store.import_experiment(export_file, name=name)
        result = verify_log(store, imported)
    data = {
        "experiment": imported,
        "sessions": len(export_file.sessions),
        "events": len(export_file.events),
        "trials": len({e["trial_id"] for e in export_file.events}),
        "verified": result.ok,
    }
    if as_json:
        out.json(data)
    else:
        out.text(f"Imported {data['events']} events of {data['trials']} trials and "
                 f"{data['sessions']} driver sessions as {imported!r}; verify: "
                 f"{'OK' if result.ok else 'DIVERGED'}")
    return out.exit_code
