"""The export format of an experiment: its JSON Schema and the validator that checks a line.

An export (JSON lines, written and read by :mod:`.export_file`) is a header line, one line
per driver session and one per event. :data:`EXPORT_SCHEMA` is the schema of one line, as
``docs/cli.md`` shows it; :func:`schema_error` checks a line against it (only the keywords the
schema uses, plus this project's ``x-storable`` and ``x-retry-policy``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from statemachine.domain.policy import RetryPolicy
from statemachine.domain.status import Decision, Status
from statemachine.exceptions import ExportFormatError, StateMachineError
from statemachine.log.records import SESSION_KINDS, check_storable, utc

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


def export_time(value: Any, where: str) -> datetime:
    """An exported time (``where``: the line's part, for the error); naive means UTC."""
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
                export_time(value, where)
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
