"""The durable event log: an SQL store of every trial event, and the live registry over it.

See ``docs/log-api.md`` for the contract the Tune integration and the CLI code against.
"""

from statemachine.log.experiment_log import ExperimentLog
from statemachine.log.export_file import ExportFile, export_records, read_export
from statemachine.log.export_format import EXPORT_SCHEMA
from statemachine.log.records import (
    AppendRequest,
    DriverSession,
    ExperimentInfo,
    SessionInfo,
    StoredEvent,
)
from statemachine.log.replay import (
    ReplayStep,
    TrialReplay,
    rehydrate,
    replay_experiment,
    replay_trial,
)
from statemachine.log.snapshot import SnapshotLoad
from statemachine.log.store import EventStore
from statemachine.log.verification import (
    Divergence,
    SeqGap,
    SessionSpan,
    Verifier,
    VerifyResult,
    verify,
)

__all__ = [
    "EXPORT_SCHEMA",
    "AppendRequest",
    "Divergence",
    "DriverSession",
    "EventStore",
    "ExperimentInfo",
    "ExperimentLog",
    "ExportFile",
    "ReplayStep",
    "SeqGap",
    "SessionInfo",
    "SessionSpan",
    "SnapshotLoad",
    "StoredEvent",
    "TrialReplay",
    "Verifier",
    "VerifyResult",
    "export_records",
    "read_export",
    "rehydrate",
    "replay_experiment",
    "replay_trial",
    "verify",
]
