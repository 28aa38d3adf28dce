"""statemachine: an event-sourced trial state machine for Ray Tune.

The pure core (statuses, typed failures, events, the retry policy and the state machine) is
importable without Ray or a database. The event log lives in :mod:`statemachine.log`, the Ray
Tune integration in :mod:`statemachine.tune` and the replay CLI in :mod:`statemachine.cli`.
"""

from statemachine.domain.classify import classify
from statemachine.domain.events import (
    EVENT_TYPES,
    CheckpointSaved,
    CheckpointsDiscarded,
    Event,
    PolicySet,
    RestoreSucceeded,
    TrialAdded,
    TrialCompleted,
    TrialFailed,
    TrialPaused,
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
from statemachine.domain.policy import ExhaustionAction, RetryPolicy
from statemachine.domain.state import Counters, TrialState
from statemachine.domain.status import Decision, Status
from statemachine.exceptions import (
    EventDecodeError,
    InvalidTransitionError,
    PolicyError,
    StateMachineError,
)

__version__ = "0.1.0"

__all__ = [
    "EVENT_TYPES",
    "AbortError",
    "ActorError",
    "CheckpointSaved",
    "CheckpointsDiscarded",
    "Counters",
    "Decision",
    "Event",
    "EventDecodeError",
    "ExhaustionAction",
    "InvalidTransitionError",
    "PolicyError",
    "PolicySet",
    "RestoreError",
    "RestoreSucceeded",
    "RetryPolicy",
    "StateMachineError",
    "Status",
    "TrainingError",
    "TransitionRecord",
    "TrialAdded",
    "TrialCompleted",
    "TrialError",
    "TrialFailed",
    "TrialPaused",
    "TrialReset",
    "TrialResumed",
    "TrialStarted",
    "TrialState",
    "TrialStopped",
    "__version__",
    "apply",
    "classify",
    "decode_event",
    "encode_event",
    "fold",
]
