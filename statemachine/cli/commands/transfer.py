"""``trial-replay export EXP`` and ``trial-replay import FILE``: copy an experiment between
stores as JSON lines (e.g. a cluster's PostgreSQL log into a local SQLite file)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from statemachine.cli.db import BadInput, open_store, resolve_write_target
from statemachine.cli.output import Output, counted, json_option
from statemachine.cli.reading import require_experiment
from statemachine.cli.safe_text import json_safe
from statemachine.log import VerifyResult
from statemachine.log import verify as verify_log
from statemachine.log.dialect import database_file
from statemachine.log.engine import to_url
from statemachine.log.export_file import export_records, read_export
from statemachine.log.records import dump_json
from statemachine.log.store import (
    refuse_foreign_target,
    remove_new_event_log,
    schema_revision,
)


@click.command("export")
@click.argument("experiment", required=False)
@click.option("-o", "--output", "path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write to FILE (default: stdout).")
@json_option
@click.pass_obj
def export(out: Output, experiment: str | None, path: Path | None, as_json: bool) -> int:
    """Export the experiment's sessions and events as JSON lines (compact, sorted keys).
    With -o and --json, print a summary object instead of nothing."""
    if path is not None and not path.parent.is_dir():
        raise BadInput(f"no such folder for the export: {path.parent}")
    lines = events = 0
    with open_store(out.db) as store, _sink(path) as write:
        experiment = require_experiment(store, experiment)
        for record in export_records(store, experiment, out.warn):  # streamed, line by line
            # C1, bidi and the like JSON-escaped: the same text, safe on a terminal.
            write(f"{json_safe(dump_json(record))}\n")
            lines += 1
            events += record["kind"] == "event"
    if path is None:
        return out.exit_code
    if as_json:
        out.json({"experiment": experiment, "file": str(path), "lines": lines,
                  "events": events})
    else:
        out.text(f"Wrote {path}: {events} events of {experiment} ({lines} lines)")
    return out.exit_code


@contextmanager
def _sink(path: Path | None) -> Iterator[Callable[[str], object]]:
    """Where export lines go: stdout, or ``path`` (written whole or not at all)."""
    if path is None:
        yield lambda text: click.echo(text, nl=False)
        return
    if path.exists() and not path.is_file():
        # /dev/null, a FIFO, a terminal: written into as it is (a rename onto it would put a
        # regular file in place of the device, /dev/null for the whole machine)
        try:
            with path.open("w", encoding="utf-8") as fh:
                yield fh.write
        except OSError as exc:
            raise BadInput(f"cannot write the export to {path}: {exc.strerror or exc}") from None
        return
    partial = path.with_name(f".{path.name}.partial")
    try:
        with partial.open("w", encoding="utf-8") as fh:
            yield fh.write
        os.replace(partial, path)
    except OSError as exc:
        raise BadInput(f"cannot write the export to {path}: {exc.strerror or exc}") from None
    finally:
        partial.unlink(missing_ok=True)


class ImportRefused(click.ClickException):
    """An export that does not replay: exit 1 (as ``verify``), nothing written."""

    exit_code = 1


@click.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--as", "name", metavar="NAME", help="Import under this experiment name.")
@click.option("--force", is_flag=True,
              help="Import a file whose replay diverges, as it is (verify will say so).")
@json_option
@click.pass_obj
def import_(out: Output, file: Path, name: str | None, force: bool, as_json: bool) -> int:
    """Import an export FILE into the --db store (created and migrated if needed: the one
    command that writes). The whole file is checked first (its schema and its replay); the
    import is one transaction, and a store it had to create is removed if it fails. Refuses an
    experiment name the store already has, and another application's database."""
    export_file = read_export(file)  # checked whole, streamed, before anything is written
    result = export_file.result
    if not result.ok and not force:
        detail = (result.divergence.describe() if result.divergence is not None
                  else counted(len(result.gaps), 'sequence gap'))
        raise ImportRefused(f"{file.name} does not replay: {detail}; nothing was imported "
                            "(--force imports it as it is)")
    target = resolve_write_target(out.db, "import")
    refuse_foreign_target(target)
    created = _new_files(target)
    # A server database (or schema) without an event log yet: its new tables go if it fails.
    new_on_server = database_file(to_url(target)) is None and schema_revision(target) is None
    try:
        with open_store(target, create=True) as store:
            imported = store.import_experiment(export_file, name=name, force=force)
            verified = verify_log(store, imported)
    except BaseException:
        for leftover in created:
            leftover.unlink(missing_ok=True)
        if new_on_server:
            remove_new_event_log(target, name or str(export_file.header["name"]))
        raise
    data = {
        "experiment": imported,
        "sessions": len(export_file.sessions),
        "events": export_file.events,
        "trials": export_file.trials,
        "snapshots": verified.snapshots_checked,
        "verified": verified.ok,
    }
    if not verified.ok:
        out.note(f"trial-replay: warning: imported with --force; verify: {_diverged(verified)}")
    if as_json:
        out.json(data)
    else:
        out.text(f"Imported {data['events']} events of {data['trials']} trials and "
                 f"{data['sessions']} driver sessions as {imported!r} "
                 f"({data['snapshots']} snapshots); verify: "
                 f"{'OK' if verified.ok else 'DIVERGED'}")
    return out.exit_code


def _diverged(result: VerifyResult) -> str:
    if result.divergence is not None:
        return result.divergence.describe()
    return counted(len(result.gaps), 'sequence gap')


def _new_files(target: str) -> list[Path]:
    """The SQLite files an import into ``target`` creates (removed if it fails)."""
    path = database_file(to_url(target))
    if path is None or path.exists():
        return []
    return [path.with_name(path.name + suffix) for suffix in ("", "-wal", "-shm", "-journal")]
