"""A consistent copy of a SQLite event log, and how far a copy of a log got.

:func:`consistent_copy` uses SQLite's online backup API from its own connection: it reads one
snapshot of the database (in WAL mode a reader never blocks the writer, and never sees half a
transaction), so the copy is a complete database even while a driver appends. The copy is
switched to the rollback journal, so it is one self-contained file (no ``-wal`` beside it) that
can be uploaded as it is.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from statemachine.exceptions import StoreError


def consistent_copy(source: Path, target: Path) -> int:
    """Copy the SQLite database ``source`` to ``target`` (replaced); returns its size in bytes.

    Raises :class:`StoreError` when ``source`` is not a readable SQLite database.
    """
    if not source.is_file():
        raise StoreError(f"cannot copy the event log {source}: no such file")
    target.unlink(missing_ok=True)
    try:
        src = sqlite3.connect(source, timeout=10)  # only read; its own connection
        try:
            dst = sqlite3.connect(target)
            try:
                src.backup(dst)  # every page in one step: one snapshot of the source
                dst.execute("PRAGMA journal_mode = DELETE")
                dst.commit()
            finally:
                dst.close()
        finally:
            src.close()
    except sqlite3.Error as exc:
        target.unlink(missing_ok=True)
        raise StoreError(f"cannot copy the event log {source}: {exc}") from exc
    return target.stat().st_size


@dataclass(frozen=True, order=True)
class LogProgress:
    """How far a log got: its newest driver session epoch, then its number of events.

    A later driver session always has a higher epoch; within one session every append adds an
    event. So of two copies of the same experiment's log, the greater one is the newer.
    """

    epoch: int
    events: int


def log_progress(path: Path) -> LogProgress:
    """The :class:`LogProgress` of the event log in the SQLite file ``path`` (read-only).

    Raises :class:`StoreError` (or a subclass) when it is not a readable event log.
    """
    from statemachine.log import EventStore

    store = EventStore.open(path, create=False)
    try:
        found = store.list_experiments()
    finally:
        store.close()
    return LogProgress(
        epoch=max((e.epoch for e in found), default=0),
        events=sum(e.events for e in found),
    )
