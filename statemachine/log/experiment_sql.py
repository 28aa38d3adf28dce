"""Experiments in SQL: finding one whose folder moved, its storage path and earlier names,
and renaming it."""

from __future__ import annotations

import json
from collections.abc import Collection

from sqlalchemy import func, select, update

from statemachine.exceptions import ExperimentExistsError
from statemachine.log.connections import Connections
from statemachine.log.engine import chunks
from statemachine.log.records import check_storable
from statemachine.log.schema import events, experiments


class ExperimentTable:
    """The experiments of one store (their rows; their events are :mod:`.queries`')."""

    def __init__(self, db: Connections) -> None:
        self._db = db

    def find_with_trials(self, trial_ids: Collection[str], *,
                                    other_than: str) -> str | None:
        """The experiment (not ``other_than``) that holds every one of ``trial_ids``; the one
        with the newest driver session when several do; ``None`` when none does."""
        wanted = sorted(set(trial_ids))
        if not wanted:
            return None
        found: dict[int, int] = {}
        db = self._db
        with db.transaction("looking for a moved experiment") as conn:
            for part in chunks(wanted):
                rows = conn.execute(
                    select(events.c.experiment_id,
                           func.count(func.distinct(events.c.trial_id)))
                    .where(events.c.trial_id.in_(part))
                    .group_by(events.c.experiment_id)
                ).all()
                for experiment_id, count in rows:
                    found[experiment_id] = found.get(experiment_id, 0) + int(count)
            holding = [i for i, count in found.items() if count == len(wanted)]
            if not holding:
                return None
            rows = conn.execute(
                select(experiments.c.name)
                .where(experiments.c.id.in_(holding), experiments.c.name != other_than)
                .order_by(experiments.c.epoch.desc(), experiments.c.id.desc())
            ).scalars().all()
        return str(rows[0]) if rows else None

    def storage_path(self, experiment: str) -> str | None:
        """The experiment's recorded storage path; ``None`` when unknown or not recorded."""
        db = self._db
        with db.transaction("reading an experiment") as conn:
            return conn.execute(select(experiments.c.storage_path)
                                .where(experiments.c.name == experiment)).scalar()

    def has(self, experiment: str) -> bool:
        """Whether the store has an experiment of that name."""
        db = self._db
        with db.transaction("reading an experiment") as conn:
            return conn.execute(select(experiments.c.id)
                                .where(experiments.c.name == experiment)).scalar() is not None

    def renames(self, experiment: str) -> list[tuple[int, str, str | None]]:
        """The earlier names of a moved or renamed experiment, oldest first: ``(epoch of the
        session that renamed it, old name, old storage path)``, from its ``ExperimentRenamed``
        events."""
        db = self._db
        with db.transaction("reading an experiment's renames") as conn:
            rows = conn.execute(
                select(events.c.epoch, events.c.payload)
                .where(events.c.experiment_id == db.experiment_id(conn, experiment),
                       events.c.type_name == "ExperimentRenamed")
                .order_by(events.c.position)
            ).all()
        found: dict[tuple[int, str, str | None], None] = {}
        for epoch, payload in rows:
            try:
                data = json.loads(payload)
                old, path = str(data["old_name"]), data.get("old_storage_path")
            except (ValueError, KeyError, TypeError):
                continue  # an undecodable row is reported by the reads that decode events
            found[(int(epoch), old, path if isinstance(path, str) else None)] = None
        return list(found)

    def rename(self, old: str, new: str) -> None:
        """Give experiment ``old`` the name ``new`` (its folder was moved or renamed): its
        events, sessions and snapshots follow. Refused when ``new`` already exists."""
        check_storable(new, "experiment name")
        with self._db.transaction("renaming an experiment", write=True) as conn:
            taken = conn.execute(
                select(experiments.c.id).where(experiments.c.name == new)).scalar()
            if taken is not None:
                raise ExperimentExistsError(
                    f"cannot rename experiment {old!r} to {new!r}: the log already has an "
                    f"experiment {new!r}")
            experiment_id = self._db.experiment_id(conn, old)
            conn.execute(update(experiments).where(experiments.c.id == experiment_id),
                         {"name": new})
        self._db.forget_experiment(old)
        self._db.remember_experiment(new, experiment_id)
