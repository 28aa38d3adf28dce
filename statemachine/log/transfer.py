"""The export format of an experiment (JSON lines), and its import into another store.

The export is the whole recorded truth of one experiment: a header line, one line per driver
session, one line per event in log order (payloads parsed; a corrupted payload is kept as its
raw text under ``payload_raw``). Lines are the log's canonical JSON
(:func:`~statemachine.log.records.dump_json`: compact, sorted keys), so an export, its import
into another store and the export of that are byte-identical.

Import (:meth:`EventStore.import_experiment`) copies the rows verbatim (times, epochs, event
ids, recorded decisions) through the log's own tables in one transaction of the store's
writer. A file is read and checked whole (:func:`read_export`) before anything is written.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, insert, select

from statemachine.exceptions import (
    EventDecodeError,
    ExperimentExistsError,
    ExportFormatError,
    UnknownExperimentError,
    close_matches,
)
from statemachine.log.records import dump_json
from statemachine.log.schema import driver_sessions, events, experiments

if TYPE_CHECKING:
    from statemachine.log.store import EventStore

FORMAT = "statemachine-export"
FORMAT_VERSION = 1


@dataclass
class ExportFile:
    """A parsed export file, checked before anything is written."""

    header: dict[str, Any]
    sessions: list[dict[str, Any]]
    events: list[dict[str, Any]]


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def export_records(
    store: EventStore, experiment: str, warn: Callable[[str], object]
) -> Iterator[dict[str, Any]]:
    """The export of ``experiment``: header, sessions, events, one dict per line.

    ``warn`` gets one line per corrupted payload or counters (exported as raw text). Write
    each with :func:`~statemachine.log.records.dump_json`.
    """
    found = store.list_experiments()
    info = next((i for i in found if i.name == experiment), None)
    if info is None:
        raise UnknownExperimentError(experiment, close_matches(experiment, [i.name for i in found]))
    yield {
        "kind": "experiment",
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "name": info.name,
        "storage_path": info.storage_path,
        "created_at": _iso(info.created_at),
        "epoch": info.epoch,
    }
    for s in store.list_sessions(experiment):
        yield {
            "kind": "session",
            "epoch": s.epoch,
            "host": s.host,
            "pid": s.pid,
            "versions": s.versions,
            "policy": s.policy.to_dict(),
            "started_at": _iso(s.started_at),
            "ended_at": _iso(s.ended_at),
            "clean_end": s.clean_end,
        }
    for r in store.read_experiment(experiment):
        record: dict[str, Any] = {
            "kind": "event",
            "trial_id": r.trial_id,
            "seq": r.seq,
            "type": r.type_name,
            "version": r.version,
            "error_type": r.error_type,
            "status_before": r.status_before,
            "status_after": r.status_after,
            "decision": r.decision,
            "epoch": r.epoch,
            "event_id": r.event_id,
            "recorded_at": _iso(r.recorded_at),
        }
        try:
            record["payload"] = r.payload
        except EventDecodeError as exc:
            warn(f"{exc}; exported as raw text (payload_raw)")
            record["payload_raw"] = r.payload_json
        try:
            record["counters"] = r.counters
        except EventDecodeError as exc:
            warn(f"{exc}; exported as raw text (counters_raw)")
            record["counters_raw"] = r.counters_json
        yield record


def _time(value: Any, where: str) -> datetime:
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        raise ExportFormatError(f"{where}: {value!r} is not an ISO time") from None


def read_export(path: Path) -> ExportFile:
    """Parse and check an export file; :class:`ExportFormatError` names the first bad line."""
    header: dict[str, Any] | None = None
    sessions: list[dict[str, Any]] = []
    events_: list[dict[str, Any]] = []
    last_seq: dict[str, int] = {}
    with path.open(encoding="utf-8") as fh:
        for number, text in enumerate(fh, start=1):
            if not text.strip():
                continue
            where = f"{path.name} line {number}"
            try:
                data = json.loads(text)
            except ValueError as exc:
                raise ExportFormatError(
                    f"{where} is not valid JSON ({exc}); nothing was imported"
                ) from None
            if not isinstance(data, dict) or "kind" not in data:
                raise ExportFormatError(f"{where} is not an export record; nothing was imported")
            kind = data["kind"]
            try:
                if kind == "experiment":
                    if data.get("format") != FORMAT:
                        raise ExportFormatError(
                            f"{where}: not a statemachine export (format {data.get('format')!r})"
                        )
                    if data.get("format_version") != FORMAT_VERSION:
                        raise ExportFormatError(
                            f"{where}: export format version {data.get('format_version')!r}; "
                            f"this statemachine reads version {FORMAT_VERSION}"
                        )
                    header = data
                    _time(data["created_at"], where)
                elif kind == "session":
                    _time(data["started_at"], where)
                    if data["ended_at"] is not None:
                        _time(data["ended_at"], where)
                    int(data["epoch"])
                    sessions.append(data)
                elif kind == "event":
                    _time(data["recorded_at"], where)
                    trial, seq = str(data["trial_id"]), int(data["seq"])
                    if seq != last_seq.get(trial, 0) + 1:
                        raise ExportFormatError(
                            f"{where}: trial {trial!r} seq {seq} does not follow seq "
                            f"{last_seq.get(trial, 0)}; nothing was imported"
                        )
                    last_seq[trial] = seq
                    if "payload" not in data and "payload_raw" not in data:
                        raise KeyError("payload")
                    events_.append(data)
                else:
                    raise ExportFormatError(f"{where}: unknown record kind {kind!r}")
            except ExportFormatError:
                raise
            except (KeyError, TypeError, ValueError) as exc:
                raise ExportFormatError(
                    f"{where}: missing or invalid field {exc}; nothing was imported"
                ) from None
            if header is None:
                raise ExportFormatError(
                    f"{where}: the file must start with the experiment header line"
                )
    if header is None:
        raise ExportFormatError(f"{path} is empty: not a statemachine export")
    return ExportFile(header, sessions, events_)


def import_export(conn: Connection, export: ExportFile, name: str | None, *, where: str) -> str:
    """Insert ``export`` as experiment ``name`` on ``conn`` (in the caller's transaction).

    Refuses an experiment that already exists (:class:`ExperimentExistsError`, naming
    ``where``, the store). Returns the name.
    """
    target = name or str(export.header["name"])
    exists = conn.execute(select(experiments.c.id).where(experiments.c.name == target)).first()
    if exists is not None:
        raise ExperimentExistsError(
            f"experiment {target!r} already exists in {where}; nothing was imported "
            "(import it under another name with --as NAME)"
        )
    experiment_id = conn.execute(
        insert(experiments).returning(experiments.c.id),
        {"name": target, "storage_path": export.header.get("storage_path"),
         "created_at": _time(export.header["created_at"], "header"),
         "epoch": int(export.header["epoch"])},
    ).scalar_one()  # fmt: skip
    if export.sessions:
        conn.execute(insert(driver_sessions), [
            {"experiment_id": experiment_id, "epoch": int(s["epoch"]), "host": s["host"],
             "pid": int(s["pid"]), "versions": dump_json(s["versions"]),
             "policy": dump_json(s["policy"]),
             "started_at": _time(s["started_at"], "session"),
             "ended_at": _time(s["ended_at"], "session") if s["ended_at"] else None,
             "clean_end": s["clean_end"]}
            for s in export.sessions
        ])  # fmt: skip
    if export.events:
        conn.execute(insert(events), [_event_row(experiment_id, e) for e in export.events])
    return target


def _event_row(experiment_id: int, e: dict[str, Any]) -> dict[str, Any]:
    payload = e["payload_raw"] if "payload_raw" in e else dump_json(e["payload"])
    if "counters_raw" in e:
        counters = e["counters_raw"]
    else:
        counters = dump_json(e["counters"]) if e.get("counters") is not None else None
    return {
        "experiment_id": experiment_id, "trial_id": e["trial_id"], "seq": int(e["seq"]),
        "type_name": e["type"], "version": int(e["version"]), "payload": payload,
        "error_type": e["error_type"], "status_before": e["status_before"],
        "status_after": e["status_after"], "decision": e["decision"], "counters": counters,
        "epoch": int(e["epoch"]), "event_id": e["event_id"],
        "recorded_at": _time(e["recorded_at"], "event"),
    }
