"""The events of a trial's life: immutable, versioned, with an exact JSON round-trip.

Every event type is registered by name in :data:`EVENT_TYPES`; :func:`encode_event` and
:func:`decode_event` are the only way events cross a process or storage boundary. An unknown
type, a version newer than this code, or a malformed payload raises :class:`EventDecodeError`.

Versioning: a field added to an event type is optional (it has a default), the type's
``version`` goes up by one, and ``since`` names the version that introduced the field. Payloads
of every older version still decode (the new field takes its default); an older payload that
carries a field its version did not have is refused as malformed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from statemachine.domain.death import UNKNOWN_DEATH, ActorDeath
from statemachine.domain.event_base import Event as Event
from statemachine.domain.failures import TrialError
from statemachine.domain.nodes import NodeRef
from statemachine.domain.policy import RetryPolicy
from statemachine.exceptions import EventDecodeError, StateMachineError


@dataclass(frozen=True)
class TrialAdded(Event):
    """A trial became known to the experiment (``config`` is its JSON-safe configuration)."""

    type_name = "TrialAdded"
    trigger = "add"
    config: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TrialStarted(Event):
    """An actor was started for the trial; ``restore_from`` names the checkpoint it restores.

    ``node`` (version 2) is where the actor runs, as far as Ray told (``None``: not known).
    """

    type_name = "TrialStarted"
    version = 2
    trigger = "start"
    since = {"node": 2}
    restore_from: str | None = None
    node: NodeRef | None = None


@dataclass(frozen=True)
class RestoreSucceeded(Event):
    """The trial restored from its checkpoint and is training again."""

    type_name = "RestoreSucceeded"
    trigger = "restored"


@dataclass(frozen=True)
class CheckpointSaved(Event):
    """The trial saved a checkpoint (``checkpoint`` is its path or id).

    ``iteration`` (version 2) is the ``training_iteration`` of the result it was saved with
    (``None``: not known): what a resume from this checkpoint continues at (issue 27).
    """

    type_name = "CheckpointSaved"
    version = 2
    trigger = "checkpoint"
    since = {"iteration": 2}
    checkpoint: str = ""
    iteration: int | None = None


@dataclass(frozen=True)
class TrialPaused(Event):
    """The scheduler paused the trial."""

    type_name = "TrialPaused"
    trigger = "pause"


@dataclass(frozen=True)
class TrialResumed(Event):
    """A paused trial, or one a driver restart interrupted, was queued to run again."""

    type_name = "TrialResumed"
    trigger = "resume"


@dataclass(frozen=True)
class TrialCompleted(Event):
    """The trial finished training."""

    type_name = "TrialCompleted"
    trigger = "complete"


@dataclass(frozen=True)
class TrialStopped(Event):
    """The trial was stopped early (by a scheduler, a stopper or the user)."""

    type_name = "TrialStopped"
    trigger = "stop"
    reason: str = ""


@dataclass(frozen=True)
class TrialFailed(Event):
    """The trial failed; ``error`` says which part failed and why.

    ``node`` (version 2) is where it failed, as far as Ray told (``None``: not known).
    Version 3: an ``ActorError`` carries its death (cause, Ray's reason words, the node's
    message; one of an older version reads as ``preempted`` or ``unknown``), and
    ``iteration`` is the ``training_iteration`` of the trial's last result when it failed
    (0: no result yet; ``None``: not recorded), what ``give_up_on_repeats`` compares.
    """

    type_name = "TrialFailed"
    version = 3
    trigger = "fail"
    required = ("error",)
    since = {"node": 2, "iteration": 3}
    error: TrialError
    node: NodeRef | None = None
    iteration: int | None = None


@dataclass(frozen=True)
class CheckpointsDiscarded(Event):
    """Checkpoints were discarded (``deleted``: their folders were removed as well)."""

    type_name = "CheckpointsDiscarded"
    trigger = "discard_checkpoints"
    checkpoints: tuple[str, ...] = ()
    deleted: bool = False
    reason: str = ""


@dataclass(frozen=True)
class PolicySet(Event):
    """The retry policy in force for this trial from now on.

    Version 2: the policy may carry ``avoid_failed_nodes`` and ``avoid_nodes_wait_s`` (a
    version 1 policy lacks them: they take their defaults). Version 3: ``restore_phase``.
    Version 4: ``on_cause``, ``cause_budgets`` and ``give_up_on_repeats``.
    """

    type_name = "PolicySet"
    version = 4
    trigger = "set_policy"
    required = ("policy",)
    policy: RetryPolicy = field(default_factory=RetryPolicy)


def with_policy(event: Event, in_force: RetryPolicy, session: RetryPolicy) -> list[Event]:
    """The events that record ``event`` for a trial whose policy in force is ``in_force``.

    The one rule that keeps a trial's stream self-contained: when a driver session's policy
    (``session``) is not the one in force for the trial (set by its last ``PolicySet``; the
    default for a new trial), a ``PolicySet`` of the session's policy goes first. A
    ``PolicySet`` itself goes alone.
    """
    if in_force is session or isinstance(event, PolicySet) or in_force == session:
        return [event]
    return [PolicySet(policy=session), event]


@dataclass(frozen=True)
class NodesAvoided(Event):
    """The trial's next attempt is placed on a node other than ``nodes`` (node ids).

    Recorded by the Ray adapter when it applied the exclusion that the fold derived from the
    restore failures of the current episode (``RetryPolicy.avoid_failed_nodes``). It changes
    nothing in the fold: it says the exclusion was in force in Ray.
    """

    type_name = "NodesAvoided"
    trigger = "avoid_nodes"
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeAvoidanceDropped(Event):
    """The exclusion of failed nodes was dropped: the next attempt may run on any node.

    ``reason``: ``no_other_node`` (no other live node could host the trial),
    ``timeout`` (it waited ``waited_ms`` for another node), ``unsupported`` (the installed Ray
    cannot place by node label). ``nodes`` are the node ids that were excluded.
    """

    type_name = "NodeAvoidanceDropped"
    trigger = "drop_avoidance"
    nodes: tuple[str, ...] = ()
    reason: str = ""
    waited_ms: int | None = None


@dataclass(frozen=True)
class TrialReset(Event):
    """An ended trial was queued again (``Tuner.restore(resume_errored=...)``)."""

    type_name = "TrialReset"
    trigger = "reset"
    from_scratch: bool = False


@dataclass(frozen=True)
class CountersAdopted(Event):
    """The trial's failure counters were taken from elsewhere, because the log does not hold
    its whole history (``source`` says where from, e.g. Ray's restored experiment state).

    The log then never grants a retry that was spent before it saw the trial: from this event
    on ``failures`` and ``preemptions`` are the adopted values (restore failures are never
    saved by Ray, so none are adopted).
    """

    type_name = "CountersAdopted"
    trigger = "adopt_counters"
    failures: int = 0
    preemptions: int = 0
    source: str = ""


@dataclass(frozen=True)
class TrialRecreated(Event):
    """A new trial now stands behind an id whose earlier trial ended: a new incarnation.

    Ray can create a trial with an id the log has already seen ended (a restored experiment
    whose param space is overwritten, runs that reuse fixed ids in one folder). The new trial
    starts with its own counters and no checkpoints; the earlier incarnation's events stay.
    """

    type_name = "TrialRecreated"
    trigger = "recreate"
    config: dict[str, Any] = field(default_factory=dict)
    reason: str = ""


@dataclass(frozen=True)
class ExperimentRenamed(Event):
    """The trial's experiment continues under a new name: its folder was moved or renamed and
    ``Tuner.restore`` found its log there, holding the same trials under ``old_name``.

    Changes nothing in the fold (the trial keeps its history and counters); it says where the
    history was recorded before.
    """

    type_name = "ExperimentRenamed"
    trigger = "note_rename"
    old_name: str = ""
    new_name: str = ""
    old_storage_path: str | None = None
    new_storage_path: str | None = None


@dataclass(frozen=True)
class FirstResult(Event):
    """The first result of the trial's current attempt (one per start, not per result).

    It ends the stretch in which ``RetryPolicy(restore_phase="until_first_report")`` counts a
    failure as a restore failure, and confirms a restore marked with
    :func:`statemachine.tune.restoring`. ``iteration`` is the result's
    ``training_iteration`` (``None``: not reported).
    """

    type_name = "FirstResult"
    trigger = "first_result"
    iteration: int | None = None


@dataclass(frozen=True)
class DeathCauseLearned(Event):
    """Why the actor of an earlier failure died, learned after that failure was recorded.

    The Ray adapter records it when Ray's state API (or its node table) answers after the
    failure at ``failure_seq`` (the trial's sequence number of that ``TrialFailed``) was
    decided without the cause. It changes nothing in the fold (no status, counter, decision,
    nor the trial's last error): that failure stays decided as it was. Whoever words or
    tallies failures reads the cause from it (``explain``, ``nodes``). ``source`` says where
    the cause came from (``state_api``, ``node_table``).
    """

    type_name = "DeathCauseLearned"
    trigger = "learn_cause"
    required = ("failure_seq", "death")
    failure_seq: int = 0
    death: ActorDeath = UNKNOWN_DEATH
    source: str = ""


@dataclass(frozen=True)
class ResumeAdvanced(Event):
    """After a driver crash, the trial resumed from what the log knew, not from Ray's older
    saved state: Ray's state would have restored it from ``from_checkpoint`` (``None``: from
    scratch); it resumed from ``to_checkpoint`` instead, ``iterations_saved`` training
    iterations later. ``finished`` names the end (``TERMINATED``, ``ERROR``) the log had seen
    and Ray's state missed: the trial is not run again (``None``: it resumes training).

    It changes nothing in the fold: the log already holds that checkpoint and that end; the
    event records what Ray was told, so ``explain`` can say it.
    """

    type_name = "ResumeAdvanced"
    trigger = "advance_resume"
    from_checkpoint: str | None = None
    to_checkpoint: str | None = None
    iterations_saved: int | None = None
    finished: str | None = None


@dataclass(frozen=True)
class ResumeNotAdvanced(Event):
    """After a driver crash, the trial resumed from Ray's saved state although the log knew
    newer work (``checkpoint``: the newest checkpoint the log recorded), and ``reason`` says
    why (its folder missing or torn, the log not holding the trial's history, the user
    turned it off). Changes nothing in the fold."""

    type_name = "ResumeNotAdvanced"
    trigger = "keep_resume"
    checkpoint: str | None = None
    reason: str = ""


EVENT_TYPES: dict[str, type[Event]] = {
    cls.type_name: cls
    for cls in (
        TrialAdded,
        TrialStarted,
        RestoreSucceeded,
        CheckpointSaved,
        TrialPaused,
        TrialResumed,
        TrialCompleted,
        TrialStopped,
        TrialFailed,
        CheckpointsDiscarded,
        PolicySet,
        TrialReset,
        NodesAvoided,
        NodeAvoidanceDropped,
        CountersAdopted,
        TrialRecreated,
        ExperimentRenamed,
        FirstResult,
        DeathCauseLearned,
        ResumeAdvanced,
        ResumeNotAdvanced,
    )
}


def encode_event(event: Event) -> tuple[str, int, dict[str, Any]]:
    """``(type name, version, JSON payload)`` of an event."""
    if EVENT_TYPES.get(event.type_name) is not type(event):
        raise StateMachineError(f"event type {type(event).__name__} is not registered")
    return event.type_name, event.version, event.to_payload()


def decode_event(type_name: str, version: int, payload: Any) -> Event:
    """Rebuild an event from its stored form, or raise :class:`EventDecodeError`."""
    cls = EVENT_TYPES.get(type_name)
    if cls is None:
        raise EventDecodeError(
            f"unknown event type {type_name!r}; known types: {', '.join(sorted(EVENT_TYPES))}"
        )
    if not isinstance(version, int) or version < 1 or version > cls.version:
        raise EventDecodeError(
            f"event {type_name!r} has schema version {version!r}, this statemachine reads "
            f"versions 1..{cls.version}; upgrade statemachine to read this log"
        )
    if not isinstance(payload, Mapping):
        raise EventDecodeError(f"event {type_name!r} payload is not a JSON object: {payload!r}")
    if version < cls.version:
        newer = sorted(name for name in payload if cls.since.get(name, 1) > version)
        if newer:
            raise EventDecodeError(
                f"event {type_name!r} of schema version {version} has field(s) of a later "
                f"version: {', '.join(newer)}"
            )
    try:
        return cls.from_payload(payload)
    except EventDecodeError:
        raise
    except (TypeError, ValueError, KeyError) as exc:
        raise EventDecodeError(f"event {type_name!r} has an invalid payload: {exc}") from None
