"""Parse each of the files Ray Tune writes into an experiment folder (pure: bytes in, values out).

Formats as observed on Ray 2.40 and 2.60 (see docs/cli.md "ingest"):

- ``experiment_state-<time>.json``: ``{"trial_data": [[trial JSON, run metadata JSON], ...],
  "runner_data": {...}, "stats": {...}}``, each pair made of JSON *strings*; blobs inside
  (``storage``, ``checkpoint_manager``) are hex cloudpickles, never loaded
  (:mod:`statemachine.ingest.pickle_scan` reads the checkpoints out of their opcodes);
- ``result.json``: one JSON object per line (a line still being written is skipped);
- ``progress.csv``: the same rows as CSV (read only when ``result.json`` is missing);
- ``error.txt``: ``Failure # N (occurred at %Y-%m-%d_%H-%M-%S)`` then ``str(exc)``, per
  failure, appended;
- ``params.json``: the trial's config.

Every parser raises :class:`ValueError` with a short reason for a file it cannot read at all.
"""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import datetime, timezone
from typing import Any

from statemachine.domain.classify_text import strip_ansi
from statemachine.ingest.model import FailureBlock, ResultRow, StateFile, StateTrial
from statemachine.ingest.pickle_scan import checkpoints_in_manager

__all__ = [
    "STAMP_FORMAT",
    "parse_error_file",
    "parse_params",
    "parse_progress_csv",
    "parse_result_lines",
    "parse_stamp",
    "parse_state_file",
]

_DECODER = json.JSONDecoder()
#: How Ray writes local times (``ray.tune.utils.util.date_str``).
STAMP_FORMAT = "%Y-%m-%d_%H-%M-%S"
_STAMP = r"\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}"
_STATE_NAME = re.compile(rf"^experiment_state-(?P<stamp>{_STAMP})\.json$")
_HEADER = re.compile(rf"^Failure # (?P<number>-?\d+) \(occurred at (?P<at>{_STAMP})\)"
                     r"(?P<extra>.*)$")
#: The header ``EventLogCallback`` writes for a restore retry (statemachine.tune.errorfile).
_RESTORE_HEADER = re.compile(rf"^Restore failure # (?P<number>\d+) \(retry \d+ of \d+\) "
                             rf"\(occurred at (?P<at>{_STAMP})\)$")
_CALL_PLACE = re.compile(r"^ray::[^\s(]+?\.(?P<method>\w+)\(\)\s*\(pid=(?P<pid>\d+), "
                         r"ip=(?P<ip>[^,)\s]+)")
_FIELD_PID = re.compile(r"^\s*pid: (?P<pid>\d+)\s*$", re.M)
_FIELD_IP = re.compile(r"^\s*ip: (?P<ip>\S+)\s*$", re.M)


def parse_stamp(text: str) -> datetime:
    """A Ray local-time stamp (``2026-12-02_05-16-26``) as a naive datetime."""
    return datetime.strptime(text, STAMP_FORMAT)


def state_stamp(name: str) -> str | None:
    """The time in an ``experiment_state-<time>.json`` name (``None``: not such a name)."""
    match = _STATE_NAME.match(name)
    return match.group("stamp") if match else None


def _json_object(text: Any, what: str) -> dict[str, Any]:
    if isinstance(text, str):
        try:
            text = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"{what} is not JSON ({exc})") from None
    if not isinstance(text, dict):
        raise ValueError(f"{what} is not a JSON object")
    return text


def _int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _number(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _blob(value: Any) -> bytes | None:
    """The bytes of a ``{"_type": "CLOUDPICKLE_FALLBACK", "value": "<hex>"}`` field."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if isinstance(value, dict) and isinstance(value.get("value"), str):
        try:
            return bytes.fromhex(value["value"])
        except ValueError:
            return None
    return None


def parse_state_file(name: str, data: bytes) -> StateFile:
    """An ``experiment_state-<time>.json`` (raises :class:`ValueError` when half-written)."""
    stamp = state_stamp(name)
    if stamp is None:
        raise ValueError("not an experiment_state-<time>.json name")
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"not complete JSON ({exc}): Ray may have been writing it") from None
    document = _json_object(document, "the file")
    pairs = document.get("trial_data")
    if not isinstance(pairs, list):
        raise ValueError("it has no trial_data list")
    trials: dict[str, StateTrial] = {}
    for index, pair in enumerate(pairs):
        if not isinstance(pair, list) or len(pair) != 2:
            raise ValueError(f"trial_data[{index}] is not a [trial, run metadata] pair")
        trial = _json_object(pair[0], f"trial_data[{index}][0]")
        meta = _json_object(pair[1], f"trial_data[{index}][1]")
        trial_id = trial.get("trial_id")
        if not isinstance(trial_id, str) or not trial_id:
            raise ValueError(f"trial_data[{index}] has no trial_id")
        config = trial.get("config")
        manager = _blob(meta.get("checkpoint_manager"))
        trials[trial_id] = StateTrial(
            trial_id=trial_id,
            status=str(trial.get("status") or "PENDING"),
            relative_logdir=_text(trial.get("relative_logdir")),
            config=config if isinstance(config, dict) else {},
            max_failures=_int(trial.get("max_failures")),
            ray_failures=_int(meta.get("num_failures")),
            error_filename=_text(meta.get("error_filename")),
            last_result_time=_number(meta.get("last_result_time")),
            trainable_name=_text(trial.get("trainable_name")),
            checkpoints=tuple(checkpoints_in_manager(manager)) if manager else (),
        )
    runner = document.get("runner_data")
    stats = document.get("stats")
    start = _number(stats.get("start_time")) if isinstance(stats, dict) else None
    session = _text(runner.get("_session_str")) if isinstance(runner, dict) else None
    offset = None
    if start is not None and session is not None:
        offset = utc_offset(session, start)
    return StateFile(name, stamp, trials, start, offset)


def utc_offset(local_stamp: str, epoch_seconds: float) -> float | None:
    """How far the local time ``local_stamp`` is ahead of UTC at ``epoch_seconds``, rounded
    to a quarter hour (``None``: the stamp does not read)."""
    try:
        local = parse_stamp(local_stamp).replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None
    return round((local - epoch_seconds) / 900) * 900.0


def _row(line: int, data: dict[str, Any]) -> ResultRow:
    # Inlined type checks: one row per result, the reader's hottest loop.
    get = data.get
    iteration, since, pid = (get("training_iteration"), get("iterations_since_restore"),
                             get("pid"))
    stamp: Any = get("timestamp")
    ip, host, name, tid, date = (get("node_ip"), get("hostname"), get("checkpoint_dir_name"),
                                 get("trial_id"), get("date"))
    restored: Any = get("time_since_restore")
    return ResultRow(
        line,
        iteration if type(iteration) is int else None,
        since if type(since) is int else None,
        float(stamp) if type(stamp) in (int, float) else None,
        pid if type(pid) is int else None,
        ip if type(ip) is str else None,
        host if type(host) is str else None,
        get("done") is True,
        name if type(name) is str else None,
        float(restored) if type(restored) in (int, float) else None,
        tid if type(tid) is str else None,
        date if type(date) is str else None,
    )


def parse_result_lines(data: bytes) -> tuple[list[ResultRow], int, int]:
    """``result.json``'s rows, how many lines could not be read, and how many were exact
    duplicates of an earlier line (dropped)."""
    rows: list[ResultRow] = []
    broken = duplicates = 0
    seen: set[str] = set()
    decode = _DECODER.raw_decode
    text = data.decode("utf-8", "surrogateescape")  # a bad byte breaks its line only
    for number, raw in enumerate(text.splitlines(), 1):
        raw = raw.strip()
        if not raw:
            continue
        if raw in seen:
            duplicates += 1
            continue
        seen.add(raw)
        try:
            value, end = decode(raw)
            if end != len(raw):
                raise ValueError("extra data")
        except ValueError:
            broken += 1
            continue
        if not isinstance(value, dict):
            broken += 1
            continue
        rows.append(_row(number, value))
    return rows, broken, duplicates


def _csv_value(text: str) -> Any:
    if text in ("True", "False"):
        return text == "True"
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return text


def parse_progress_csv(data: bytes) -> list[ResultRow]:
    """``progress.csv``'s rows (the columns ``result.json`` has, as CSV)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text ({exc})") from None
    reader = csv.DictReader(io.StringIO(text))
    return [_row(number, {k: _csv_value(v) for k, v in record.items() if k and v is not None})
            for number, record in enumerate(reader, 2)]


def _place(text: str) -> tuple[int | None, str | None, str | None]:
    """The pid, node IP and actor method a failure's text names."""
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    match = _CALL_PLACE.match(first)
    if match is not None:
        return int(match.group("pid")), match.group("ip"), match.group("method")
    pid = _FIELD_PID.search(text)
    ip = _FIELD_IP.search(text)
    return (int(pid.group("pid")) if pid else None, ip.group("ip") if ip else None, None)


def parse_error_file(data: bytes) -> list[FailureBlock]:
    """``error.txt``'s failures, in order (text before the first header is ignored)."""
    text = strip_ansi(data.decode("utf-8", "replace"))
    blocks: list[FailureBlock] = []
    header: tuple[int, str, bool] | None = None
    body: list[str] = []

    def close() -> None:
        if header is None:
            return
        number, at, rewritten = header
        content = "\n".join(body).strip("\n")
        pid, ip, call = _place(content)
        blocks.append(FailureBlock(len(blocks) + 1, number, at, content, pid, ip, call,
                                   rewritten))

    for line in text.splitlines():
        match = _HEADER.match(line)
        restore = None if match else _RESTORE_HEADER.match(line)
        if match is None and restore is None:
            body.append(line)
            continue
        close()
        body = []
        if match is not None:
            header = (int(match.group("number")), match.group("at"),
                      bool(match.group("extra").strip()))
        else:
            assert restore is not None
            header = (int(restore.group("number")), restore.group("at"), True)
    close()
    return blocks


def parse_params(data: bytes) -> dict[str, Any]:
    """``params.json``: the trial's config (a JSON object)."""
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value
