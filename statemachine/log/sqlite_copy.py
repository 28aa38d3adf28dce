"""A consistent copy of a SQLite event log, how far a copy of a log got, and which log it is.

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

from statemachine.exceptions import NotAnEventLogError, StoreError


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


@dataclass(frozen=True)
class LogIdentity:
    """Which log a copy is of: an experiment's random ``log_id`` (written when it was
    created) and where the experiment is stored."""

    experiment: str
    log_id: str | None
    """``None``: created before identities (schema revision 0003) and not opened since."""
    storage_path: str | None

    def describe(self) -> str:
        """For messages: the experiment, where it is stored and the log's id."""
        where = self.storage_path or "a storage path not recorded"
        log = f"log {self.log_id}" if self.log_id else "a log of unrecorded identity"
        return f"experiment {self.experiment!r} stored at {where}, {log}"

    def same_log(self, other: LogIdentity) -> bool:
        """Whether ``other`` can be a copy of the same log: the same id, or (when either id
        is not known) the same storage path, or nothing recorded to tell them apart."""
        if self.log_id and other.log_id:
            return self.log_id == other.log_id
        if self.storage_path and other.storage_path:
            return self.storage_path == other.storage_path
        return True


@dataclass(frozen=True)
class LogFacts:
    """How far a log file got, and which log it is (per experiment it holds)."""

    progress: LogProgress
    identities: tuple[LogIdentity, ...]

    def identity(self, experiment: str | None) -> LogIdentity | None:
        """The identity of ``experiment`` in this file; when it has no such experiment (it
        holds one under its old name: moved), the one of its newest experiment."""
        for found in self.identities:
            if found.experiment == experiment:
                return found
        return self.identities[0] if self.identities else None


def log_facts(path: Path, *, check_pages: bool = False) -> LogFacts:
    """The :class:`LogFacts` of the event log in the SQLite file ``path``, read-only.

    Any schema revision this code knows is read (a copy made by an older statemachine is
    not refused for its age); ``check_pages`` also runs SQLite's ``quick_check``. Raises
    :class:`StoreError` (or a subclass) when it is not a readable event log.
    """
    from sqlalchemy import func, inspect, select

    from statemachine.log import migrate
    from statemachine.log.engine import make_engine, to_url, translated
    from statemachine.log.opening import schema_revision
    from statemachine.log.schema import events, experiments

    url = to_url(path)
    revision = schema_revision(url)
    if revision is None:
        raise NotAnEventLogError(f"{path} is not a statemachine event log (no event log schema)")
    migrate.check_revision(revision, url, writable=True)  # a newer one is refused
    engine = make_engine(url, writable=False)
    try:
        with translated("reading the event log", url), engine.connect() as conn:
            if check_pages:
                verdict = conn.exec_driver_sql("PRAGMA quick_check").scalar()
                if verdict != "ok":
                    raise StoreError(f"{path} is damaged (SQLite quick_check: {verdict})")
            known = {c["name"] for c in inspect(conn).get_columns("experiments")}
            log_id = experiments.c.log_id if "log_id" in known else None
            counts: dict[int, int] = {
                int(experiment_id): int(n) for experiment_id, n in conn.execute(
                    select(events.c.experiment_id, func.count())
                    .group_by(events.c.experiment_id)
                ).all()
            }
            rows = conn.execute(
                select(experiments.c.id, experiments.c.name, experiments.c.epoch,
                       experiments.c.storage_path,
                       *([log_id] if log_id is not None else []))
                .order_by(experiments.c.epoch.desc(), experiments.c.id.desc())
            ).all()
    finally:
        engine.dispose()
    return LogFacts(
        progress=LogProgress(
            epoch=max((int(r[2]) for r in rows), default=0),
            events=sum(counts.get(int(r[0]), 0) for r in rows),
        ),
        identities=tuple(
            LogIdentity(experiment=str(r[1]), storage_path=r[3],
                        log_id=r[4] if len(r) > 4 else None)
            for r in rows
        ),
    )


def log_progress(path: Path) -> LogProgress:
    """The :class:`LogProgress` of the event log in the SQLite file ``path`` (read-only).

    Raises :class:`StoreError` (or a subclass) when it is not a readable event log.
    """
    return log_facts(path).progress
