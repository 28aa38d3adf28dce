"""statemachine: an event-sourced trial state machine for Ray Tune.

The pure core (statuses, typed failures, events, the retry policy and the state machine) is
importable without Ray or a database. The event log lives in :mod:`statemachine.log`, the Ray
Tune integration in :mod:`statemachine.tune` and the replay CLI in :mod:`statemachine.cli`.
"""

import importlib
from typing import TYPE_CHECKING, Any

from statemachine.distribution import VERSION
from statemachine.domain.classify import classify
from statemachine.domain.classify_text import classify_text
from statemachine.domain.compiled import apply_compiled, fold_compiled
from statemachine.domain.death import ActorDeath, DeathCause
from statemachine.domain.events import (
    EVENT_TYPES,
    CheckpointSaved,
    CheckpointsDiscarded,
    CountersAdopted,
    DeathCauseLearned,
    Event,
    ExperimentRenamed,
    FirstResult,
    NodeAvoidanceDropped,
    NodesAvoided,
    PolicySet,
    RestoreSucceeded,
    ResumeAdvanced,
    ResumeNotAdvanced,
    TrialAdded,
    TrialCompleted,
    TrialFailed,
    TrialPaused,
    TrialRecreated,
    TrialReset,
    TrialResumed,
    TrialStarted,
    TrialStopped,
    decode_event,
    encode_event,
)
from statemachine.domain.failures import (
    AbortError,
    ActorError,
    RestoreError,
    TrainingError,
    TrialError,
)
from statemachine.domain.machine import TransitionRecord, apply, fold
from statemachine.domain.node_tally import NodeTally, tally_nodes
from statemachine.domain.nodes import NodeRef
from statemachine.domain.policy import (
    COUNT_PREEMPTION_ENV,
    RESTORE_RETRY_ENV,
    CauseAction,
    ExhaustionAction,
    RestorePhase,
    RetryPolicy,
)
from statemachine.domain.state import Counters, TrialState
from statemachine.domain.status import Decision, Status
from statemachine.exceptions import (
    ConcurrencyError,
    ConfigurationError,
    CredentialsNotFoundError,
    EventDecodeError,
    ExperimentExistsError,
    ExportDivergedError,
    ExportFormatError,
    FencedError,
    IngestError,
    InvalidTransitionError,
    LogCopyRefusedError,
    LogFileLostError,
    LogSyncError,
    NotAnEventLogError,
    NotARayExperimentError,
    PolicyError,
    RecordedByCallbackError,
    SchemaVersionError,
    StateMachineError,
    StoreError,
    StoreNotFoundError,
    UnknownExperimentError,
    UnknownTrialError,
    UnstorableValueError,
    UnsupportedDatabaseError,
)

if TYPE_CHECKING:
    from statemachine.ingest import IngestResult, ingest_experiment
    from statemachine.log import (
        EventStore,
        ExperimentLog,
        StoredEvent,
        VerifyResult,
        replay_experiment,
        replay_trial,
        verify,
    )
    from statemachine.log.read import ReadModel, TrialSummary
    from statemachine.tune import EventLogCallback as EventLogCallback

# Loaded on first use: the log pulls in SQLAlchemy and Alembic (~0.4 s), the callback Ray.
_LAZY = {
    "EventStore": "statemachine.log",
    "ExperimentLog": "statemachine.log",
    "StoredEvent": "statemachine.log",
    "VerifyResult": "statemachine.log",
    "replay_experiment": "statemachine.log",
    "replay_trial": "statemachine.log",
    "verify": "statemachine.log",
    "ReadModel": "statemachine.log.read",
    "TrialSummary": "statemachine.log.read",
    "IngestResult": "statemachine.ingest",
    "ingest_experiment": "statemachine.ingest",
    "EventLogCallback": "statemachine.tune",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'statemachine' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    """The module's names, the lazy ones included."""
    return sorted({*globals(), *_LAZY})


__version__ = VERSION

# Every public name but EventLogCallback: it needs the optional Ray extra, so it is reached as
# statemachine.EventLogCallback (or statemachine.tune) and `from statemachine import *` works,
# without importing Ray, whether Ray is installed or not. The log's lazy names are safe
# (their dependencies are required ones); `import *` loads them.
__all__ = [
    "COUNT_PREEMPTION_ENV",
    "EVENT_TYPES",
    "RESTORE_RETRY_ENV",
    "AbortError",
    "ActorDeath",
    "ActorError",
    "CauseAction",
    "CheckpointSaved",
    "CheckpointsDiscarded",
    "ConcurrencyError",
    "ConfigurationError",
    "Counters",
    "CountersAdopted",
    "CredentialsNotFoundError",
    "DeathCause",
    "DeathCauseLearned",
    "Decision",
    "Event",
    "EventDecodeError",
    "EventStore",
    "ExhaustionAction",
    "ExperimentExistsError",
    "ExperimentLog",
    "ExperimentRenamed",
    "ExportDivergedError",
    "ExportFormatError",
    "FencedError",
    "FirstResult",
    "IngestError",
    "IngestResult",
    "InvalidTransitionError",
    "LogCopyRefusedError",
    "LogFileLostError",
    "LogSyncError",
    "NodeAvoidanceDropped",
    "NodeRef",
    "NodeTally",
    "NodesAvoided",
    "NotARayExperimentError",
    "NotAnEventLogError",
    "PolicyError",
    "PolicySet",
    "ReadModel",
    "RecordedByCallbackError",
    "RestoreError",
    "RestorePhase",
    "RestoreSucceeded",
    "ResumeAdvanced",
    "ResumeNotAdvanced",
    "RetryPolicy",
    "SchemaVersionError",
    "StateMachineError",
    "Status",
    "StoreError",
    "StoreNotFoundError",
    "StoredEvent",
    "TrainingError",
    "TransitionRecord",
    "TrialAdded",
    "TrialCompleted",
    "TrialError",
    "TrialFailed",
    "TrialPaused",
    "TrialRecreated",
    "TrialReset",
    "TrialResumed",
    "TrialStarted",
    "TrialState",
    "TrialStopped",
    "TrialSummary",
    "UnknownExperimentError",
    "UnknownTrialError",
    "UnstorableValueError",
    "UnsupportedDatabaseError",
    "VerifyResult",
    "__version__",
    "apply",
    "apply_compiled",
    "classify",
    "classify_text",
    "decode_event",
    "encode_event",
    "fold",
    "fold_compiled",
    "ingest_experiment",
    "replay_experiment",
    "replay_trial",
    "tally_nodes",
    "verify",
]
