"""An export file: writing an experiment's lines, and reading one back, checked whole.

The export is the whole recorded truth of one experiment: a header line, one line per driver
session, one line per event in log order (payloads parsed; a corrupted payload is kept as its
raw text under ``payload_raw``). Lines are the log's canonical JSON
(:func:`~statemachine.log.records.dump_json`: compact, sorted keys), so an export, its import
into another store and the export of that are byte-identical.

:func:`read_export` reads a file line by line (memory holds one line and one state per trial,
never the file), validates every line against
:data:`~statemachine.log.export_format.EXPORT_SCHEMA` and replays the whole experiment through
:class:`~statemachine.log.verification.Verifier`; the import into a store
(:mod:`.transfer`) reads the events again, as the rows :func:`event_row` makes of them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from statemachine.domain.state import TrialState
from statemachine.exceptions import (
    EventDecodeError,
    ExportFormatError,
    UnknownExperimentError,
    close_matches,
)
from statemachine.log.export_format import (
    EXPORT_SCHEMA,
    FORMAT,
    FORMAT_VERSION,
    export_time,
    schema_error,
)
from statemachine.log.history import ExportableHistory
from statemachine.log.records import SESSION_KINDS, StoredEvent, dump_json
from statemachine.log.verification import SessionSpan, Verifier, VerifyResult


@dataclass
class ExportFile:
    """An export file, read and checked whole (:func:`read_export`) but not held in memory.

    ``result`` is the replay of its events (:func:`~statemachine.log.verify`'s checks);
    ``states`` the fold of every trial that replays (the snapshots an import writes).
    """

    path: Path
    header: dict[str, Any]
    sessions: list[dict[str, Any]]
    events: int
    trials: int
    result: VerifyResult
    states: dict[str, TrialState] = field(default_factory=dict)


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def export_records(
    store: ExportableHistory, experiment: str, warn: Callable[[str], object]
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
            "session_kind": s.kind,
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


def _lines(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(where, record)`` of every non-blank line, each validated against the schema."""
    try:
        fh = path.open(encoding="utf-8", errors="strict")
    except OSError as exc:
        raise ExportFormatError(f"cannot read {path}: {exc.strerror or exc}") from None
    with fh:
        number = 0
        while True:
            number += 1
            where = f"{path.name} line {number}"
            try:
                text = fh.readline()
            except UnicodeDecodeError as exc:
                raise ExportFormatError(
                    f"{where} is not UTF-8 text ({exc.reason}); nothing was imported"
                ) from None
            if not text:
                return
            if not text.strip():
                continue
            try:
                data = json.loads(text)
            except (ValueError, RecursionError) as exc:
                raise ExportFormatError(
                    f"{where} is not valid JSON ({exc}); nothing was imported"
                ) from None
            if not isinstance(data, dict) or "kind" not in data:
                raise ExportFormatError(f"{where} is not an export record; nothing was imported")
            if data.get("kind") == "experiment":
                _check_header(data, where)
            problem = schema_error(data, EXPORT_SCHEMA)
            if problem:
                raise ExportFormatError(f"{where}: {problem}; nothing was imported")
            yield where, data


def _check_header(data: dict[str, Any], where: str) -> None:
    if data.get("format") != FORMAT:
        raise ExportFormatError(
            f"{where}: not a statemachine export (format {data.get('format')!r})"
        )
    if data.get("format_version") != FORMAT_VERSION:
        raise ExportFormatError(
            f"{where}: export format version {data.get('format_version')!r}; "
            f"this statemachine reads version {FORMAT_VERSION}"
        )


def _stored(position: int, experiment: str, e: dict[str, Any]) -> StoredEvent:
    """The row an export line becomes (``position``: its place in the file)."""
    row = event_row(0, e)
    return StoredEvent(
        position, experiment, row["trial_id"], row["seq"], row["type_name"], row["version"],
        row["payload"], row["error_type"], row["status_before"], row["status_after"],
        row["decision"], row["counters"], row["epoch"], row["event_id"], row["recorded_at"],
    )  # fmt: skip


def read_export(path: Path) -> ExportFile:
    """Read and check an export file whole, one line at a time, before anything is written.

    Every line must match :data:`EXPORT_SCHEMA` (:class:`ExportFormatError` names the first
    bad line and field), the header come first, sessions before events, each trial's seqs
    follow each other, and no session or event be newer than the header's epoch. The events
    are replayed with :func:`~statemachine.log.verify`'s checks into :attr:`ExportFile.result`.
    """

    header: dict[str, Any] | None = None
    sessions: list[dict[str, Any]] = []
    verifier: Verifier | None = None
    last_seq: dict[str, int] = {}
    count = 0
    for where, data in _lines(path):
        kind = data["kind"]
        if header is None:
            if kind != "experiment":
                raise ExportFormatError(
                    f"{where}: the file must start with the experiment header line"
                )
            header = data
            continue
        if kind == "experiment":
            raise ExportFormatError(f"{where}: a second experiment header; nothing was imported")
        if data["epoch"] > header["epoch"]:
            raise ExportFormatError(
                f"{where}: epoch {data['epoch']} is newer than the experiment's "
                f"{header['epoch']}; nothing was imported"
            )
        if kind == "session":
            if verifier is not None:
                raise ExportFormatError(
                    f"{where}: a session after the events; nothing was imported"
                )
            sessions.append(data)
            continue
        if verifier is None:
            verifier = Verifier(str(header["name"]), sessions=[
                SessionSpan(s["epoch"], export_time(s["started_at"], "session"),
                            session_kind(s.get("session_kind")))
                for s in sessions
            ])  # fmt: skip
        trial, seq = data["trial_id"], data["seq"]
        if seq != last_seq.get(trial, 0) + 1:
            raise ExportFormatError(
                f"{where}: trial {trial!r} seq {seq} does not follow seq "
                f"{last_seq.get(trial, 0)}; nothing was imported"
            )
        last_seq[trial] = seq
        count += 1
        verifier.feed(_stored(count, str(header["name"]), data))
    if header is None:
        raise ExportFormatError(f"{path} is empty: not a statemachine export")
    if verifier is None:
        verifier = Verifier(str(header["name"]))
    result = verifier.result()
    states = {t: s for t, s in verifier.states.items() if t not in verifier.broken}
    return ExportFile(path, header, sessions, count, len(last_seq), result, states)


def export_events(path: Path) -> Iterator[dict[str, Any]]:
    """The event lines of a file :func:`read_export` has checked, read again."""
    for _, data in _lines(path):
        if data["kind"] == "event":
            yield data


def event_row(experiment_id: int, e: dict[str, Any]) -> dict[str, Any]:
    """The ``events`` row of an export's event line (``experiment_id``: the importing
    store's id of the experiment; ``0`` when the row is only read)."""
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
        "recorded_at": export_time(e["recorded_at"], "event"),
    }


def session_kind(value: Any) -> str | None:
    """An exported session's ``session_kind`` (checked by the schema; absent in older
    exports: not known)."""
    return value if value in SESSION_KINDS else None
