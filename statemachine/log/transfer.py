"""The import of an export file into a store: the SQL, in the caller's transaction.

:func:`~statemachine.log.export_file.read_export` has checked the file whole (its schema, its
order, and its replay) before anything is written; :func:`import_export` then copies the rows
verbatim (times, epochs, event ids, recorded decisions) on the store's writer, with a snapshot
of every trial's fold (snapshots are a cache of this code's fold, so they are rebuilt, not
copied). A file whose replay diverges is refused unless ``force``.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import Connection, insert, select

from statemachine.exceptions import ExperimentExistsError, ExportDivergedError
from statemachine.log.export_file import ExportFile, event_row, export_events, session_kind
from statemachine.log.export_format import export_time
from statemachine.log.records import check_storable, dump_json, new_log_id
from statemachine.log.schema import driver_sessions, events, experiments, snapshots
from statemachine.log.snapshot import encode_state, machine_version, summary_values
from statemachine.log.verification import VerifyResult

#: Rows per ``INSERT`` of an import (memory holds one batch).
IMPORT_BATCH = 2000


def import_export(
    conn: Connection, export: ExportFile, name: str | None, *, where: str, force: bool = False
) -> str:
    """Insert ``export`` as experiment ``name`` on ``conn`` (in the caller's transaction).

    Refuses an experiment that already exists (:class:`ExperimentExistsError`, naming
    ``where``, the store) and an export whose replay diverges unless ``force``
    (:class:`ExportDivergedError`). Events are streamed from the file in batches; every
    trial that replays gets a snapshot of its fold. Returns the name.
    """
    if not export.result.ok and not force:
        raise ExportDivergedError(
            f"{export.path.name} does not replay: {_diverged_text(export.result)}; nothing was "
            "imported (import it as it is with --force)",
            export.result.divergence,
        )
    target = name or str(export.header["name"])
    check_storable(target, "experiment name")
    exists = conn.execute(select(experiments.c.id).where(experiments.c.name == target)).first()
    if exists is not None:
        raise ExperimentExistsError(
            f"experiment {target!r} already exists in {where}; nothing was imported "
            "(import it under another name with --as NAME)"
        )
    epoch = int(export.header["epoch"])
    experiment_id = conn.execute(
        insert(experiments).returning(experiments.c.id),
        {"name": target, "storage_path": export.header.get("storage_path"),
         "created_at": export_time(export.header["created_at"], "header"), "epoch": epoch,
         "log_id": new_log_id()},  # a new log: an identity of its own
    ).scalar_one()  # fmt: skip
    if export.sessions:
        conn.execute(insert(driver_sessions), [
            {"experiment_id": experiment_id, "epoch": int(s["epoch"]), "host": s["host"],
             "pid": int(s["pid"]), "versions": dump_json(s["versions"]),
             "policy": dump_json(s["policy"]),
             "started_at": export_time(s["started_at"], "session"),
             "ended_at": export_time(s["ended_at"], "session") if s["ended_at"] else None,
             "clean_end": s["clean_end"], "kind": session_kind(s.get("session_kind"))}
            for s in export.sessions
        ])  # fmt: skip
    batch: list[dict[str, Any]] = []
    for e in export_events(export.path):
        batch.append(event_row(experiment_id, e))
        if len(batch) >= IMPORT_BATCH:
            conn.execute(insert(events), batch)
            batch = []
    if batch:
        conn.execute(insert(events), batch)
    states = [s for s in export.states.values() if s.seq > 0]
    if states:
        now, tag = datetime.now(timezone.utc), machine_version()
        conn.execute(insert(snapshots), [
            {"experiment_id": experiment_id, "trial_id": s.trial_id, "seq": s.seq,
             "state": encode_state(s), "machine_version": tag, "epoch": epoch, "taken_at": now,
             **summary_values(s)}
            for s in states
        ])  # fmt: skip
    return target


def _diverged_text(result: VerifyResult) -> str:
    if result.divergence is not None:
        return result.divergence.describe()
    gap = result.gaps[0]
    return f"trial {gap.trial_id!r} jumps from seq {gap.after_seq} to {gap.next_seq}"
