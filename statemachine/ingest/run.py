"""``ingest_experiment``: read a Ray experiment folder, record its reconstructed history.

The steps, each refusing before anything is written: read the folder (not a Ray experiment:
:class:`~statemachine.exceptions.NotARayExperimentError`), refuse an experiment the
``EventLogCallback`` recorded (in the folder's own log, in the target log, or as rewritten
``error.txt`` headers), plan against what the target log holds, and only then create or open
the log for writing and append the plan in one transaction. A log file this ingest created
is removed again when the append fails.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statemachine.exceptions import (
    ConcurrencyError,
    IngestError,
    StoreError,
)
from statemachine.ingest.files import ExperimentFolder, StorageFolder, open_folder
from statemachine.ingest.model import RayExperiment
from statemachine.ingest.provenance import NOT_KNOWN
from statemachine.ingest.reader import read_experiment
from statemachine.ingest.reconstruct import Plan, plan_ingest, summarise
from statemachine.ingest.writer import (
    EMPTY,
    LogView,
    log_view,
    record_plan,
    refuse_recorded,
    refuse_rewritten,
)
from statemachine.log import EventStore
from statemachine.log.bulk import collector_paused
from statemachine.log.dialect import database_file
from statemachine.log.engine import describe, to_url
from statemachine.log.records import check_storable, storable_name
from statemachine.log.remote import is_storage_uri, storage_key
from statemachine.log.store import refuse_foreign_target, remove_new_event_log, schema_revision
from statemachine.log_location import DEFAULT_LOG_FILENAME

__all__ = ["IngestResult", "default_log", "ingest_experiment"]

Warn = Callable[[str], None]


@dataclass
class IngestResult:
    """What an ingest read and recorded (``epoch``: its session; ``None`` when it found
    nothing new and wrote nothing)."""

    experiment: str
    source: str
    log: str
    epoch: int | None
    created: bool
    plan: Plan
    ray: RayExperiment

    @property
    def events_added(self) -> int:
        """How many events the ingest appended."""
        return sum(len(p.events) for p in self.plan.trials) if self.epoch is not None else 0

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (schema ``ingest`` in docs/cli.md)."""
        written = self.epoch is not None
        return {
            "experiment": self.experiment,
            "source": self.source,
            "log": self.log,
            "epoch": self.epoch,
            "created_log": self.created,
            "events_added": self.events_added,
            "event_types": summarise(self.plan.trials) if written else {},
            "trials": [
                {
                    "trial_id": p.trial_id,
                    "new": not p.known,
                    "events_added": len(p.events) if written else 0,
                    "status": p.state.status.value,
                    "num_failures": p.state.failures,
                    "ray_status": p.ray_status,
                    "ray_num_failures": p.ray_failures,
                    "failure_headers": p.failure_headers,
                    "not_added": list(p.late),
                    "disagreement": p.disagreement,
                }
                for p in self.plan.trials
            ],
            "policy": self.plan.policy.to_dict(),
            "restore_retry_num_inferred": self.plan.restore_retry_num,
            "state_files": [s.name for s in self.ray.state_files],
            "skipped_state_files": [{"file": f, "reason": why} for f, why in self.ray.skipped],
            "not_read": list(self.ray.not_read),
            "not_known": list(NOT_KNOWN),
        }


def default_log(folder: ExperimentFolder) -> str:
    """Where the log goes when no ``--db`` is given: where the callback would have kept it
    (``statemachine.db`` in a local experiment folder; for one on storage, its local log
    ``~/ray_results/<scheme>-<hash of the storage URI>/statemachine.db``)."""
    local = folder.local
    if local is not None:
        return str(local / DEFAULT_LOG_FILENAME)
    assert isinstance(folder, StorageFolder)
    key = storage_key(folder.fs, folder.base)
    return str(Path("~/ray_results").expanduser() / key / DEFAULT_LOG_FILENAME)


def _target(db: str | None, folder: ExperimentFolder) -> str:
    if not db:
        return default_log(folder)
    if is_storage_uri(db):
        raise IngestError("cannot write to an event log on storage; write to a local file or "
                          "a database (--db FILE|URL)")
    path = Path(db).expanduser()
    if "://" not in db and path.is_dir():
        return str(path / DEFAULT_LOG_FILENAME)
    return db


def _exists(target: str) -> bool:
    path = database_file(to_url(target))
    if path is not None:
        return path.exists()
    return schema_revision(target) is not None


@contextmanager
def _folder_log(folder: ExperimentFolder) -> Iterator[EventStore | None]:
    """The log the callback keeps in the experiment folder, opened read-only."""
    local = folder.local
    if local is not None:
        with EventStore.open(local / DEFAULT_LOG_FILENAME, create=False) as store:
            yield store
        return
    from statemachine.log.remote import downloaded

    with downloaded(folder.label) as copy, EventStore.open(copy, create=False) as store:
        yield store


def _refuse_folder_log(folder: ExperimentFolder, ray: RayExperiment, names: set[str],
                       warn: Warn) -> None:
    where = f"{folder.label}/{DEFAULT_LOG_FILENAME}"
    try:
        with _folder_log(folder) as store:
            assert store is not None
            for name in sorted(names):
                refuse_recorded(log_view(store, name), name, where, folder.label)
    except StoreError as exc:
        warn(f"{where} was not read ({exc}); it is not taken as the callback's log")


def ingest_experiment(location: str, *, db: str | None = None, name: str | None = None,
                      warn: Warn = lambda _: None, now: float | None = None) -> IngestResult:
    """Ingest the Ray experiment folder ``location`` (a path or a storage URI) into the log
    ``db`` (default: :func:`default_log`) as experiment ``name`` (default: the folder's name).

    Raises an :class:`~statemachine.exceptions.IngestError` (not an experiment, recorded by
    the callback) or a :class:`~statemachine.exceptions.StoreError`; either way nothing was
    written.
    """
    folder = open_folder(location)
    with collector_paused():  # values only, no cycles: see statemachine.log.bulk
        ray = read_experiment(folder, warn)
    experiment = check_storable(name or storable_name(ray.name), "experiment name")
    refuse_rewritten(ray)
    target = _target(db, folder)
    if ray.callback_log:
        _refuse_folder_log(folder, ray, {ray.name, experiment}, warn)
    refuse_foreign_target(target)
    existed = _exists(target)
    view: LogView = EMPTY
    if existed:
        with EventStore.open(target, create=True) as store:
            view = log_view(store, experiment)
        refuse_recorded(view, experiment, describe(to_url(target)), target)
    with collector_paused():
        plan = plan_ingest(ray, view.states, view.event_ids,
                           now=time.time() if now is None else now)
    result = IngestResult(experiment, ray.label, describe(to_url(target)), None, not existed,
                          plan, ray)
    if not plan.events():
        result.created = False
        return result
    created = _new_files(target) if not existed else []
    try:
        with EventStore.open(target, create=True) as store:
            result.epoch = record_plan(store, experiment, plan, storage_path=ray.location)
    except ConcurrencyError as exc:
        _clean(created, target, experiment, existed)
        raise IngestError(f"the log at {result.log} changed while ingesting ({exc}); nothing "
                          "was ingested: run the ingest again") from exc
    except BaseException:
        _clean(created, target, experiment, existed)
        raise
    return result


def _new_files(target: str) -> list[Path]:
    path = database_file(to_url(target))
    if path is None:
        return []
    return [path.with_name(path.name + suffix) for suffix in ("", "-wal", "-shm", "-journal")]


def _clean(created: list[Path], target: str, experiment: str, existed: bool) -> None:
    for leftover in created:
        leftover.unlink(missing_ok=True)
    if not existed and database_file(to_url(target)) is None:
        remove_new_event_log(target, experiment)

