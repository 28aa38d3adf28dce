"""The export format of an experiment (JSON lines), and its import into another store.

The export is the whole recorded truth of one experiment: a header line, one line per driver
session, one line per event in log order (payloads parsed; a corrupted payload is kept as its
raw text under ``payload_raw``). Lines are the log's canonical JSON
(:func:`~statemachine.log.records.dump_json`: compact, sorted keys), so an export, its import
into another store and the export of that are byte-identical.

Import reads the file twice, line by line (memory holds one line and one state per trial,
never the file): :func:`read_export` validates every line against :data:`EXPORT_SCHEMA` and
replays the whole experiment through :class:`~statemachine.log.replay.Verifier` before
anything is written; :meth:`EventStore.import_experiment` then copies the rows verbatim
(times, epochs, event ids, recorded decisions) in one transaction of the store's writer, with
a snapshot of every trial's fold (snapshots are a cache of this code's fold, so they are
rebuilt, not copied). A file whose replay diverges is refused unless ``force``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, insert, select

from statemachine.domain.policy import RetryPolicy
from statemachine.domain.state import TrialState
from statemachine.domain.status import Decision, Status
from statemachine.exceptions import (
    EventDecodeError,
    ExperimentExistsError,
    ExportDivergedError,
    ExportFormatError,
    StateMachineError,
    UnknownExperimentError,
    close_matches,
)
from statemachine.log.records import (
    SESSION_KINDS,
    StoredEvent,
    check_storable,
    dump_json,
    new_log_id,
    utc,
)
from statemachine.log.schema import driver_sessions, events, experiments, snapshots
from statemachine.log.snapshot import encode_state, machine_version, summary_values

if TYPE_CHECKING:
    from statemachine.log.replay import VerifyResult
    from statemachine.log.store import EventStore

FORMAT = "statemachine-export"
FORMAT_VERSION = 1


_INT32 = 2**31 - 1  # the Integer columns (PostgreSQL's int4)
_TEXT = {"type": "string", "x-storable": True}
_TIME = {"type": "string", "format": "date-time"}


def _name(max_length: int) -> dict[str, Any]:
    return {"type": "string", "minLength": 1, "maxLength": max_length, "x-storable": True}


def _count(minimum: int) -> dict[str, Any]:
    return {"type": "integer", "minimum": minimum, "maximum": _INT32}


#: The JSON Schema (draft 2020-12) of one line of an export, as ``docs/cli.md`` shows it.
#: ``"x-storable": true`` is this project's keyword: text a database can store (no NUL, no
#: lone surrogate); ``policy`` must also be a valid :class:`~statemachine.RetryPolicy`.
EXPORT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "statemachine export line",
    "$defs": {
        "experiment": {
            "type": "object",
            "required": ["kind", "format", "format_version", "name", "storage_path",
                         "created_at", "epoch"],
            "additionalProperties": False,
            "properties": {
                "kind": {"const": "experiment"},
                "format": {"const": FORMAT},
                "format_version": {"const": FORMAT_VERSION},
                "name": _name(255),
                "storage_path": {"type": ["string", "null"], "x-storable": True},
                "created_at": _TIME,
                "epoch": _count(1),
            },
        },
        "session": {
            "type": "object",
            "required": ["kind", "epoch", "host", "pid", "versions", "policy", "started_at",
                         "ended_at", "clean_end"],
            "additionalProperties": False,
            "properties": {
                "kind": {"const": "session"},
                "epoch": _count(1),
                "host": {"type": "string", "maxLength": 255, "x-storable": True},
                "pid": _count(0),
                "versions": {"type": "object", "additionalProperties": _TEXT},
                "policy": {"type": "object", "x-retry-policy": True},
                "started_at": _TIME,
                "ended_at": {"type": ["string", "null"], "format": "date-time"},
                "clean_end": {"type": ["boolean", "null"]},
                "session_kind": {"enum": [*SESSION_KINDS, None]},
            },
        },
        "event": {
            "type": "object",
            "required": ["kind", "trial_id", "seq", "type", "version", "error_type",
                         "status_before", "status_after", "decision", "epoch", "event_id",
                         "recorded_at"],
            "anyOf": [{"required": ["payload"]}, {"required": ["payload_raw"]}],
            "additionalProperties": False,
            "properties": {
                "kind": {"const": "event"},
                "trial_id": _name(255),
                "seq": _count(1),
                "type": _name(64),
                "version": _count(1),
                "payload": {"type": "object"},
                "payload_raw": _TEXT,
                "error_type": {"type": ["string", "null"], "maxLength": 64, "x-storable": True},
                "status_before": {"enum": [None, *(s.value for s in Status)]},
                "status_after": {"enum": [None, *(s.value for s in Status)]},
                "decision": {"enum": [None, *(d.value for d in Decision)]},
                "counters": {"type": ["object", "null"]},
                "counters_raw": _TEXT,
                "epoch": _count(1),
                "event_id": _name(64),
                "recorded_at": _TIME,
            },
        },
    },
    "oneOf": [{"$ref": "#/$defs/experiment"}, {"$ref": "#/$defs/session"},
              {"$ref": "#/$defs/event"}],
}  # fmt: skip


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


def _time(value: Any, where: str) -> datetime:
    try:
        moment = datetime.fromisoformat(str(value))
    except ValueError:
        raise ExportFormatError(f"{where}: {value!r} is not an ISO time") from None
    return utc(moment)  # naive means UTC, as everywhere in the log


_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "boolean": (bool,), "object": (dict,),
    "array": (list,), "null": (type(None),),
}  # fmt: skip


def _type_ok(value: Any, name: str) -> bool:
    if name == "integer" and isinstance(value, bool):
        return False
    return isinstance(value, _TYPES[name])


def schema_error(value: Any, schema: dict[str, Any], path: str = "") -> str | None:
    """Why ``value`` does not match ``schema`` (``None``: it does), for the keywords
    :data:`EXPORT_SCHEMA` uses: ``type``, ``const``, ``enum``, ``minimum``/``maximum``,
    ``minLength``/``maxLength``, ``format: date-time``, ``required``, ``properties``,
    ``additionalProperties``, ``anyOf``/``oneOf`` of requirements or ``$ref``, and this
    project's ``x-storable`` and ``x-retry-policy``."""
    where = path or "the line"
    if "$ref" in schema:
        return schema_error(value, EXPORT_SCHEMA["$defs"][schema["$ref"].rsplit("/", 1)[1]], path)
    if "const" in schema and (value != schema["const"] or type(value) is not type(schema["const"])):
        return f"{where} must be {schema['const']!r}, got {value!r}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{where} must be one of {schema['enum']}, got {value!r}"
    kinds = schema.get("type")
    if kinds is not None:
        names = [kinds] if isinstance(kinds, str) else kinds
        if not any(_type_ok(value, n) for n in names):
            return f"{where} must be {' or '.join(names)}, got {type(value).__name__} {value!r:.60}"
    if isinstance(value, int) and not isinstance(value, bool):
        if value < schema.get("minimum", value) or value > schema.get("maximum", value):
            return (f"{where} must be between {schema.get('minimum')} and "
                    f"{schema.get('maximum')}, got {value}")  # fmt: skip
    if isinstance(value, str):
        if not schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", len(value)):
            return (f"{where} must be {schema.get('minLength', 0)} to "
                    f"{schema.get('maxLength')} characters, got {len(value)}")  # fmt: skip
        if schema.get("format") == "date-time":
            try:
                _time(value, where)
            except ExportFormatError as exc:
                return str(exc)
        if schema.get("x-storable"):
            try:
                check_storable(value, where, max_length=max(len(value), 1))
            except StateMachineError as exc:
                if value:  # emptiness is minLength's business
                    return str(exc)
    if isinstance(value, dict):
        missing = [k for k in schema.get("required", ()) if k not in value]
        if missing:
            return f"{where} has no {', '.join(map(repr, missing))}"
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            sub = properties.get(key, extra)
            if sub is False:
                return f"{where} has an unknown field {key!r}"
            if isinstance(sub, dict):
                found = schema_error(item, sub, f"{path}.{key}" if path else str(key))
                if found:
                    return found
        if schema.get("x-retry-policy"):
            try:
                RetryPolicy.from_dict(value)
            except (StateMachineError, TypeError) as exc:
                return f"{where} is not a retry policy: {exc}"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            if key == "oneOf" and isinstance(value, dict) and isinstance(value.get("kind"), str):
                ref = {"$ref": f"#/$defs/{value['kind']}"}
                if value["kind"] in EXPORT_SCHEMA["$defs"] and schema is EXPORT_SCHEMA:
                    return schema_error(value, ref, path)
                return f"{where} has an unknown kind {value.get('kind')!r}"
            errors = [schema_error(value, sub, path) for sub in schema[key]]
            if all(errors):
                return errors[0] if len(errors) == 1 else f"{where}: " + "; or ".join(
                    e for e in errors if e)
    return None


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
    row = _event_row(0, e)
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
    from statemachine.log.replay import SessionSpan, Verifier

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
                SessionSpan(s["epoch"], _time(s["started_at"], "session"),
                            _session_kind(s.get("session_kind")))
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


def _events(path: Path) -> Iterator[dict[str, Any]]:
    for _, data in _lines(path):
        if data["kind"] == "event":
            yield data


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
         "created_at": _time(export.header["created_at"], "header"), "epoch": epoch,
         "log_id": new_log_id()},  # a new log: an identity of its own
    ).scalar_one()  # fmt: skip
    if export.sessions:
        conn.execute(insert(driver_sessions), [
            {"experiment_id": experiment_id, "epoch": int(s["epoch"]), "host": s["host"],
             "pid": int(s["pid"]), "versions": dump_json(s["versions"]),
             "policy": dump_json(s["policy"]),
             "started_at": _time(s["started_at"], "session"),
             "ended_at": _time(s["ended_at"], "session") if s["ended_at"] else None,
             "clean_end": s["clean_end"], "kind": _session_kind(s.get("session_kind"))}
            for s in export.sessions
        ])  # fmt: skip
    batch: list[dict[str, Any]] = []
    for e in _events(export.path):
        batch.append(_event_row(experiment_id, e))
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


def _session_kind(value: Any) -> str | None:
    """An exported session's ``session_kind`` (checked by the schema; absent in older
    exports: not known)."""
    return value if value in SESSION_KINDS else None
