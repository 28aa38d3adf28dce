"""Driver sessions in SQL: starting one (the next epoch of its experiment, which fences every
older session out) and ending it."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError

from statemachine.distribution import VERSION
from statemachine.domain.policy import RetryPolicy
from statemachine.exceptions import ConfigurationError, StoreError
from statemachine.log.connections import Connections
from statemachine.log.records import (
    SESSION_KINDS,
    DriverSession,
    check_storable,
    dump_json,
    new_log_id,
    storable_name,
    utcnow,
)
from statemachine.log.schema import driver_sessions, experiments


def _versions() -> dict[str, str]:
    found = {"statemachine": VERSION, "python": platform.python_version()}
    for package in ("ray", "sqlalchemy", "alembic"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


class SessionTable:
    """The driver sessions of one store."""

    def __init__(self, db: Connections) -> None:
        self._db = db

    def start(
        self, experiment: str, policy: RetryPolicy, storage_path: str | None, kind: str | None
    ) -> DriverSession:
        """See :meth:`EventStore.start_session`."""
        check_storable(experiment, "experiment name")
        if kind is not None and kind not in SESSION_KINDS:
            raise ConfigurationError(
                f"session kind must be one of {', '.join(SESSION_KINDS)} or None, got {kind!r}"
            )
        if storage_path is not None:
            storage_path = storable_name(storage_path)
        for attempt in range(3):
            try:
                return self._start(experiment, policy, storage_path, kind)
            except StoreError as exc:
                # Two drivers creating the same new experiment at once (PostgreSQL): the
                # loser's insert hits the unique name; the retry finds the row.
                if not isinstance(exc.__cause__, IntegrityError) or attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _start(
        self, experiment: str, policy: RetryPolicy, storage_path: str | None, kind: str | None
    ) -> DriverSession:
        with self._db.transaction("starting a driver session", write=True) as conn:
            row = conn.execute(
                select(experiments.c.id, experiments.c.epoch, experiments.c.log_id)
                .where(experiments.c.name == experiment)
                .with_for_update()
            ).first()
            now = utcnow()  # the epoch begins once the lock is held
            values: dict[str, Any] = {}
            if row is None:
                experiment_id = conn.execute(
                    insert(experiments).returning(experiments.c.id),
                    {"name": experiment, "storage_path": storage_path, "created_at": now,
                     "epoch": 0, "log_id": new_log_id()},
                ).scalar_one()  # fmt: skip
                epoch = 1
            else:
                experiment_id, epoch = row[0], row[1] + 1
                if row[2] is None:  # created before revision 0003: it gets its identity now
                    values["log_id"] = new_log_id()
            values["epoch"] = epoch
            if storage_path is not None:
                values["storage_path"] = storage_path
            conn.execute(update(experiments).where(experiments.c.id == experiment_id), values)
            conn.execute(
                insert(driver_sessions),
                {
                    "experiment_id": experiment_id,
                    "epoch": epoch,
                    "host": socket.gethostname()[:255],
                    "pid": os.getpid(),
                    "versions": dump_json(_versions()),
                    "policy": dump_json(policy.to_dict()),
                    "started_at": now,
                    "kind": kind,
                },
            )
        self._db.remember_experiment(experiment, experiment_id)
        return DriverSession(experiment, experiment_id, epoch, policy, now)


    def end(self, session: DriverSession, clean: bool) -> None:
        """See :meth:`EventStore.end_session`."""
        with self._db.transaction("ending a driver session", write=True) as conn:
            conn.execute(
                update(driver_sessions)
                .where(
                    driver_sessions.c.experiment_id == session.experiment_id,
                    driver_sessions.c.epoch == session.epoch,
                    driver_sessions.c.ended_at.is_(None),
                )
                .values(ended_at=utcnow(), clean_end=clean)
            )
