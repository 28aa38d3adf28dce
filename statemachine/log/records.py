"""Plain values the event store hands out and takes in (no SQL in here)."""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, NamedTuple

from statemachine.domain.events import Event, decode_event
from statemachine.domain.machine import TransitionRecord
from statemachine.domain.policy import RetryPolicy
from statemachine.exceptions import EventDecodeError, UnstorableValueError

_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape_surrogate(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def dump_json(value: Any) -> str:
    """The one JSON form the log writes (sorted keys, compact): equal values, equal text.

    Text is stored as it is (UTF-8), except lone surrogates (``os.fsdecode`` of a non-UTF-8
    file name gives ``"shard-\\udcff.bin"``), which no database encoding can hold: they are
    written as the JSON escape ``\\udcff``, which ``json.loads`` turns back into the very
    same string. Lossless, readable, and valid JSON.
    """
    return storable_json(_ENCODER.encode(value))  # json.dumps builds an encoder per call


def storable_json(text: str) -> str:
    """JSON ``text`` with each lone surrogate written as its escape (see :func:`dump_json`)."""
    if text.isascii():
        return text
    return _SURROGATE.sub(_escape_surrogate, text)


def check_storable(value: str, field: str, *, max_length: int = 255) -> str:
    """``value`` if a database can store it as an identifier, else :class:`UnstorableValueError`.

    Identifiers (experiment names, trial ids, event ids) are compared in SQL, so they must be
    valid Unicode without NUL characters (PostgreSQL refuses NUL; no encoding holds a lone
    surrogate) and fit their column.
    """
    if not isinstance(value, str):
        raise UnstorableValueError(f"{field} must be text, got {type(value).__name__}")
    if not value.isascii():
        if _SURROGATE.search(value):
            raise UnstorableValueError(
                f"{field} {value.encode('utf-8', 'backslashreplace').decode()!r} holds a lone "
                "surrogate (a non-UTF-8 file name decoded by os.fsdecode?), which no database "
                "can store; use storable_name() or valid Unicode"
            )
    if "\x00" in value:
        raise UnstorableValueError(f"{field} {value!r} holds a NUL character; remove it")
    if not value or len(value) > max_length:
        raise UnstorableValueError(
            f"{field} must be 1 to {max_length} characters, got {len(value)}: {value[:40]!r}"
        )
    return value


def storable_name(text: str) -> str:
    """``text`` with lone surrogates written as ``\\xNN`` (the bytes they stand for).

    For names taken from the filesystem (an experiment folder's name): a non-UTF-8 byte that
    ``os.fsdecode`` turned into a surrogate is shown as Python shows bytes (``exp-\\xff``).
    The same folder always gives the same name; valid text is returned unchanged.
    """
    if text.isascii() or not _SURROGATE.search(text):
        return text
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


_RAW_DECODE = json.JSONDecoder().raw_decode


def parse_json(text: str) -> Any:
    """``json.loads(text)``, faster for what :func:`dump_json` wrote (no surrounding space).

    Raises ``ValueError``/``TypeError`` as ``json.loads`` does.
    """
    try:
        value, end = _RAW_DECODE(text)
        if end == len(text):
            return value
    except (TypeError, ValueError):
        pass
    return json.loads(text)  # the exact rules and error (leading space, trailing data, ...)


def load_json(text: str | None, what: str) -> Any:
    """Parse a stored JSON document, or raise :class:`EventDecodeError` naming ``what``."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except (TypeError, ValueError) as exc:
        raise EventDecodeError(f"{what} is not valid JSON ({exc}): {str(text)[:80]!r}") from None


def new_event_id() -> str:
    """A new event id: 32 hex characters, the time in milliseconds (12) then 80 random bits.

    ULID's layout (48-bit time, 80-bit randomness) in hex: ids made one after the other sort
    near each other, so the unique index on ``(experiment_id, event_id)`` grows at its end
    instead of at a random page for every event (random ids made SQLite's insert of a
    1,000-event batch take 1.6 times as long at 80,000 events, and more as the log grows).
    Unique as a random id is: 80 random bits within each millisecond.

    The one place event ids are made (the store's default, the live log's records, the Tune
    recorder's queue). Ids derived from one (a ``PolicySet`` written for an event gets
    ``<id>/p``) stay within the column's 64 characters.
    """
    return f"{time.time_ns() // 1_000_000:012x}{os.urandom(10).hex()}"


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A column value the database holds that is not of the column's type (a row broken
    behind the log's back, e.g. ``recorded_at = 'garbage'`` in SQLite)."""

    raw: object


#: What an unreadable ``recorded_at`` reads as (the row's ``damage`` says so).
UNREADABLE_TIME = datetime(1, 1, 1, tzinfo=timezone.utc)


def new_log_id() -> str:
    """A new log identity (``experiments.log_id``): 32 random hex characters."""
    return os.urandom(16).hex()


def new_event_ids(count: int) -> list[str]:
    """``count`` new event ids (as :func:`new_event_id`: one time, one read of the random
    source)."""
    now = f"{time.time_ns() // 1_000_000:012x}"
    text = os.urandom(10 * count).hex()
    return [now + text[i : i + 20] for i in range(0, 20 * count, 20)]


def utc(value: datetime) -> datetime:
    """``value`` as an aware UTC datetime (naive values are taken to be UTC already)."""
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


def utcnow() -> datetime:
    """The current time, aware, in UTC."""
    return datetime.now(timezone.utc)


@dataclass(frozen=True, slots=True)
class DriverSession:
    """A driver's hold on an experiment: appends carry its ``epoch`` and are fenced by it."""

    experiment: str
    experiment_id: int
    epoch: int
    policy: RetryPolicy
    started_at: datetime


class AppendRequest(NamedTuple):
    """One event to append: ``expected_seq`` is the trial's last sequence number (0: none).

    A named tuple: the live log makes one per recorded event.
    """

    trial_id: str
    event: Event
    expected_seq: int
    record: TransitionRecord | None = None
    event_id: str | None = None


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """One row of the log. ``payload_json``/``counters_json`` are parsed on access."""

    position: int
    experiment: str
    trial_id: str
    seq: int
    type_name: str
    version: int
    payload_json: str
    error_type: str | None
    status_before: str | None
    status_after: str | None
    decision: str | None
    counters_json: str | None
    epoch: int
    event_id: str
    recorded_at: datetime
    damage: str | None = None
    """A recorded column that could not be read (``recorded_at`` then reads as
    :data:`UNREADABLE_TIME`): what is wrong, naming the field (``recorded_at 'garbage' is
    not a time``), else ``None``."""

    @property
    def recorded_at_known(self) -> datetime | None:
        """:attr:`recorded_at`, or ``None`` when the stored value is unreadable."""
        return None if self.damage is not None else self.recorded_at

    @property
    def payload(self) -> dict[str, Any]:
        """The event's JSON payload (raises :class:`EventDecodeError` if corrupted)."""
        try:
            value = json.loads(self.payload_json)
        except (TypeError, ValueError):
            value = load_json(self.payload_json, self._where("payload"))  # raises, with where
        if not isinstance(value, dict):
            raise EventDecodeError(f"{self._where('payload')} is not a JSON object")
        return value

    @property
    def counters(self) -> dict[str, int] | None:
        """The trial's counters after this event, as recorded (``None`` if not recorded)."""
        value = load_json(self.counters_json, self._where("counters"))
        if value is not None and not isinstance(value, dict):
            raise EventDecodeError(f"{self._where('counters')} is not a JSON object")
        return value

    @property
    def event(self) -> Event:
        """The decoded event (raises :class:`EventDecodeError` for a corrupted row)."""
        payload = self.payload  # its own error already names the row: raised as it is
        try:
            return decode_event(self.type_name, self.version, payload)
        except EventDecodeError as exc:
            raise EventDecodeError(f"{self._where('event')}: {exc}") from None

    def _where(self, what: str) -> str:
        where = f"event at position {self.position} (trial {self.trial_id!r}, seq {self.seq})"
        return where if what == "event" else f"{what} of {where}"


#: A stored event as a bulk fold reads it (:meth:`EventStore.read_fold_rows`):
#: ``(position, trial_id, seq, type_name, version, payload, counters)``, the last two the
#: stored JSON text.
FoldRow = tuple[int, str, int, str, int, str, "str | None"]


@dataclass(frozen=True, slots=True)
class ExperimentInfo:
    """An experiment in the store, with its size."""

    name: str
    storage_path: str | None
    created_at: datetime
    epoch: int
    trials: int
    events: int
    last_recorded_at: datetime | None


#: How a driver session began: a fresh ``Tuner.fit()``, a ``Tuner.restore``, or ``ingest``:
#: not a driver but ``trial-replay ingest`` reconstructing history from Ray's files (its
#: events are marked reconstructed by this alone, and carry Ray's times as recorded_at).
SESSION_KINDS = ("fresh", "restore", "ingest")

#: The session kind of ``trial-replay ingest``.
INGEST_KIND = "ingest"


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """A driver session of an experiment, as recorded."""

    experiment: str
    epoch: int
    host: str
    pid: int
    versions: dict[str, str]
    policy: RetryPolicy
    started_at: datetime
    ended_at: datetime | None
    clean_end: bool | None
    kind: str | None = None
    """How the driver began: ``"fresh"`` (``Tuner.fit()``), ``"restore"``
    (``Tuner.restore``), ``"ingest"`` (history reconstructed from Ray's files by
    ``trial-replay ingest``) or ``None`` (not known: recorded before it was, or not said)."""
