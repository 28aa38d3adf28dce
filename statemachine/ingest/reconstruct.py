"""Turn what Ray's files say into domain events: a best-effort history of every trial.

For each trial, the items of its timeline (:mod:`statemachine.ingest.timeline`) become
events folded through the state machine as they are made, so each one is valid where the
trial is and the glue between them follows from the fold:

- ``added``: ``TrialAdded`` with the config of ``params.json`` (else the snapshot's);
- an attempt: ``TrialStarted`` on its node (``node_ip``) restoring from the checkpoint of
  the iteration it continued from, after ``TrialResumed`` when the attempt before it ended
  without a failure (a driver restart or a pause) or ``TrialReset`` when the trial had ended
  (``Tuner.restore(resume_errored=True)``: counters kept; ``restart_errored`` gives Ray a new
  trial id); an attempt that began again at iteration 1 while checkpoints were known first
  discards them (``CheckpointsDiscarded``: Ray did not restore them);
  its first result gives ``RestoreSucceeded`` (when restoring) and ``FirstResult``;
- a checkpoint: ``CheckpointSaved`` (its path as Ray names it);
- a failure: ``TrialFailed`` typed from its text by
  :func:`~statemachine.domain.classify_text.classify_text`; a failure of a process that
  never reported is preceded by its own ``TrialStarted``;
- the newest snapshot's status ends the trial: ``TrialCompleted`` (it was running),
  ``TrialStopped`` (it never ran again), ``TrialPaused``.

Counters come out of the fold. Where they disagree with Ray's, the log takes Ray's and says
why with ``CountersAdopted``: after a failure whose header number (Ray's ``num_failures``
then) differs, and at the end when the newest snapshot counts more failures than
``error.txt`` holds (it reaches storage late after a driver crash).

Ray saves neither ``TUNE_RESTORE_RETRY_NUM`` nor its restore counter: the policy's
``restore_retry_num`` is the longest run of restore failures that did not count
(``Failure # N`` repeating the number before it), a lower bound of what was set.

Incremental: a trial already in the log continues from its folded state; items whose
events the log holds (by their ids, derived from the source) are skipped, and an item the
folder gained *before* what the log holds (a start, a result or a failure of it) cannot be
inserted into the past: it is reported, not added. A checkpoint is known by its folder's
name: one Ray writes again under a name the log holds is not recorded twice.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, field
from typing import Any

from statemachine.domain.classify_text import classify_text, parse_error_text
from statemachine.domain.compiled import apply_compiled
from statemachine.domain.events import (
    CheckpointSaved,
    CheckpointsDiscarded,
    CountersAdopted,
    Event,
    FirstResult,
    RestoreSucceeded,
    TrialAdded,
    TrialCompleted,
    TrialFailed,
    TrialPaused,
    TrialReset,
    TrialResumed,
    TrialStarted,
    TrialStopped,
    with_policy,
)
from statemachine.domain.machine import TransitionRecord
from statemachine.domain.nodes import NodeRef
from statemachine.domain.policy import RetryPolicy
from statemachine.domain.state import TrialState
from statemachine.domain.status import Status
from statemachine.exceptions import InvalidTransitionError
from statemachine.ingest.model import KnownCheckpoint, RayExperiment, StateFile, StateTrial
from statemachine.ingest.timeline import Item, TrialTimeline, trial_timeline

__all__ = ["Plan", "PlannedEvent", "TrialPlan", "event_id", "plan_ingest",
           "restore_retries_seen"]

_LIVE = (Status.RUNNING, Status.RESTORING, Status.PAUSED)
#: ``TrialStopped.reason`` for a trial Ray's snapshot ended without it running again.
ENDED = "Ray's experiment state ends it TERMINATED"
#: ``CheckpointsDiscarded.reason`` for an attempt Ray started from iteration 1.
FROM_SCRATCH = "Ray started the next attempt from scratch (iteration 1), not from them"


def event_id(trial_id: str, key: str) -> str:
    """The event id derived from the source: ``ray-`` and 40 hex digits of a hash of the
    trial and the item's key (44 characters, never a live driver's 32-digit id)."""
    digest = hashlib.sha256(f"{trial_id}\n{key}".encode("utf-8", "surrogatepass"))
    return "ray-" + digest.hexdigest()[:40]


@dataclass(frozen=True)
class PlannedEvent:
    """One event to append: its trial, id, source time (seconds since the epoch), the
    trial's last seq before it, and what the fold did with it."""

    trial_id: str
    event: Event
    event_id: str
    time: float
    expected_seq: int
    record: TransitionRecord


@dataclass
class TrialPlan:
    """What an ingest adds to one trial, and how the result compares with Ray's view."""

    trial_id: str
    known: bool
    state: TrialState
    events: list[PlannedEvent] = field(default_factory=list)
    late: list[str] = field(default_factory=list)
    """Items the folder gained before what the log already holds: not added."""
    ray_status: str | None = None
    ray_failures: int | None = None
    failure_headers: int = 0

    @property
    def disagreement(self) -> str | None:
        """How the log's trial differs from Ray's newest snapshot (``None``: it agrees)."""
        if self.ray_status is None:
            return None
        parts = []
        live_in_ray = self.ray_status in ("PENDING", "RUNNING", "PAUSED")
        if self.state.status.value != self.ray_status and not (
            live_in_ray and self.state.status in (Status.PENDING, *_LIVE)
        ):
            parts.append(f"status {self.state.status.value}, Ray's {self.ray_status}")
        if self.ray_failures is not None and self.ray_failures != self.state.failures:
            parts.append(f"failures {self.state.failures}, Ray's {self.ray_failures}")
        return "; ".join(parts) or None


@dataclass
class Plan:
    """Everything an ingest would append, per trial, and the policy it inferred."""

    policy: RetryPolicy
    restore_retry_num: int
    trials: list[TrialPlan]

    def events(self) -> list[PlannedEvent]:
        """Every planned event in one timeline: by time, each trial's own order kept."""
        order = {plan.trial_id: i for i, plan in enumerate(self.trials)}
        merged = [e for plan in self.trials for e in plan.events]
        merged.sort(key=lambda e: (e.time, order[e.trial_id], e.expected_seq))
        return merged


def restore_retries_seen(ray: RayExperiment) -> int:
    """The longest run of restore failures that Ray did not count (a header repeating the
    number before it): a lower bound of ``TUNE_RESTORE_RETRY_NUM``."""
    longest = 0
    for trial in ray.trials.values():
        run = previous = 0
        for block in trial.failures:
            if parse_error_text(block.text).restoring and block.number == previous:
                run += 1
                longest = max(longest, run)
            else:
                run = 0
            previous = block.number
    return longest


def _newest(ray: RayExperiment) -> dict[str, tuple[StateFile, StateTrial]]:
    found: dict[str, tuple[StateFile, StateTrial]] = {}
    for state in ray.state_files:  # oldest first: a newer snapshot wins
        for trial_id, trial in state.trials.items():
            found[trial_id] = (state, trial)
    return found


def _known_checkpoints(ray: RayExperiment, trial_id: str) -> dict[str, KnownCheckpoint]:
    known: dict[str, KnownCheckpoint] = {}
    for state in ray.state_files:
        trial = state.trials.get(trial_id)
        for checkpoint in trial.checkpoints if trial is not None else ():
            if checkpoint.iteration is not None or checkpoint.name not in known:
                known[checkpoint.name] = checkpoint
    return known


def plan_ingest(ray: RayExperiment, states: Mapping[str, TrialState], stored: Set[str],
                *, now: float) -> Plan:
    """What to append so the log holds Ray's history of every trial of ``ray``.

    ``states``: the log's folded state of each trial it already holds; ``stored``: the ids
    of its events; ``now``: the time given to an event nothing dates (seconds).
    """
    retries = restore_retries_seen(ray)
    newest = _newest(ray)
    policies = {
        trial_id: RetryPolicy(max_failures=newest[trial_id][1].max_failures
                              if trial_id in newest else 0, restore_retry_num=retries)
        for trial_id in ray.trial_ids()
    }
    common = Counter(policies.values()).most_common(1)
    session = common[0][0] if common else RetryPolicy(restore_retry_num=retries)
    starts = [s.start_time for s in ray.state_files if s.start_time is not None]
    default_time = min(starts) if starts else now
    hostnames: dict[str, str] = {}
    for trial in ray.trials.values():
        for row in trial.rows:
            if row.node_ip and row.hostname:
                hostnames.setdefault(row.node_ip, row.hostname)
    plans = []
    for trial_id in ray.trial_ids():
        files = ray.trials.get(trial_id)
        in_state = newest.get(trial_id)
        if files is not None:
            timeline = trial_timeline(files, _known_checkpoints(ray, trial_id), ray.utc_offset)
            config: dict[str, Any] | None = files.params
        else:
            timeline = TrialTimeline(trial_id, (Item("added", "added", None),), {}, {})
            config = None
        if config is None and in_state is not None:
            config = in_state[1].config
        builder = _TrialBuilder(trial_id, states.get(trial_id), stored, policies[trial_id],
                                timeline, default_time, hostnames)
        builder.run(config or {})
        if in_state is not None:
            builder.end(*in_state)
        builder.plan.failure_headers = len(files.failures) if files is not None else 0
        plans.append(builder.plan)
    return Plan(session, retries, plans)


class _TrialBuilder:
    """Expands one trial's new items into events, folding each as it is made."""

    def __init__(self, trial_id: str, state: TrialState | None, stored: Set[str],
                 policy: RetryPolicy, timeline: TrialTimeline, default_time: float,
                 hostnames: Mapping[str, str]) -> None:
        self.trial_id = trial_id
        self.hostnames = hostnames
        self.stored = stored
        self.policy = policy
        self.timeline = timeline
        self.work = state.copy() if state is not None else TrialState(trial_id)
        self.plan = TrialPlan(trial_id, known=state is not None, state=self.work)
        self.last_time = default_time
        self.last_record: TransitionRecord | None = None

    # ---------------------------------------------------------------- emitting

    def _emit(self, event: Event, key: str, time: float | None) -> None:
        if time is not None and time > self.last_time:
            self.last_time = time
        base = event_id(self.trial_id, key)
        for e in with_policy(event, self.work.policy, self.policy):
            seq = self.work.seq
            record = apply_compiled(self.work, e, None, self.last_record)
            self.last_record = record
            self.plan.events.append(PlannedEvent(
                self.trial_id, e, base if e is event else base + "/p", self.last_time, seq,
                record))

    def _marker(self, item: Item) -> str:
        suffix = {"start": "/started", "first": "/first"}.get(item.kind, "")
        return event_id(self.trial_id, item.key + suffix)

    # ---------------------------------------------------------------- items

    def run(self, config: dict[str, Any]) -> None:
        items = self.timeline.items
        done = {i for i, item in enumerate(items) if self._marker(item) in self.stored}
        # A checkpoint the log holds never makes what the folder shows before it late: a
        # worker outliving its killed driver writes one more folder, which Ray writes again
        # under the same name once the trial resumes (that second save is not recorded).
        last_done = max((i for i in done if items[i].kind != "checkpoint"), default=-1)
        for index, item in enumerate(items):
            if index in done:
                continue
            if index < last_done:
                self.plan.late.append(_describe(item))
                continue
            try:
                self._item(item, config)
            except InvalidTransitionError as exc:
                self.plan.late.append(f"{_describe(item)} (not valid where the trial is: "
                                      f"{exc})")

    def _item(self, item: Item, config: dict[str, Any]) -> None:
        work = self.work
        if item.kind == "added":
            if work.status is Status.NEW:
                self._emit(TrialAdded(config=config), item.key, item.time)
        elif item.kind == "start":
            assert item.attempt is not None
            first = item.attempt.first
            self._start(item, NodeRef(node_ip=first.node_ip, hostname=first.hostname),
                        item.attempt.restored_iteration)
        elif item.kind == "first":
            assert item.attempt is not None
            if work.status is Status.RESTORING:
                self._emit(RestoreSucceeded(), item.key + "/restored", item.time)
            self._emit(FirstResult(iteration=item.attempt.first.iteration),
                       item.key + "/first", item.time)
        elif item.kind == "checkpoint":
            assert item.checkpoint is not None
            if work.status is not Status.ERROR:
                path = self.timeline.checkpoint_paths.get(item.checkpoint, item.checkpoint)
                self._emit(CheckpointSaved(checkpoint=path), item.key, item.time)
        elif item.kind == "failure":
            self._failure(item)

    def _start(self, item: Item, node: NodeRef, restored: int | None) -> None:
        work = self.work
        if work.status in _LIVE:
            self._emit(TrialResumed(), item.key + "/resumed", item.time)
        elif work.status.is_terminal:
            # Only resume_errored runs an ended trial again under its id (restart_errored
            # makes a new trial, with a new id): counters kept, as Ray keeps them.
            self._emit(TrialReset(), item.key + "/reset", item.time)
        if restored == 0 and work.checkpoints:
            self._emit(CheckpointsDiscarded(checkpoints=work.checkpoints, reason=FROM_SCRATCH),
                       item.key + "/discarded", item.time)
        restore_from = None
        if restored:
            name = next((n for n, it in self.timeline.checkpoint_iterations.items()
                         if it == restored and n in self.timeline.checkpoint_paths), None)
            restore_from = self.timeline.checkpoint_paths.get(name) if name else None
            if restore_from is not None and restore_from not in work.checkpoints:
                restore_from = None  # not saved in this history: the fold's latest applies
        self._emit(TrialStarted(restore_from=restore_from, node=node if node.known else None),
                   item.key + "/started", item.time)

    def _failure(self, item: Item) -> None:
        block = item.failure
        assert block is not None
        work = self.work
        # The node as the results name it (IP and hostname), so a tally sees one node.
        node = (NodeRef(node_ip=block.node_ip, hostname=self.hostnames.get(block.node_ip))
                if block.node_ip else None)
        if not (item.ends_attempt and work.status in _LIVE):
            self._start(item, node or NodeRef(), None)  # a process that never reported
        parsed = parse_error_text(block.text)
        if work.status is Status.RESTORING and parsed.call not in (None, "restore") \
                and not parsed.restoring:
            # Ray's restore returned; the attempt then failed in training before reporting.
            self._emit(RestoreSucceeded(), item.key + "/restored", item.time)
        error = classify_text(block.text, work.status, self.policy.fatal_exception_types)
        self._emit(TrialFailed(error=error, node=node), item.key, item.time)
        if work.failures != block.number and block.number >= 0:
            self._emit(CountersAdopted(
                failures=block.number, preemptions=work.preemptions,
                source=f"Ray's error.txt (Failure # {block.number} at {block.occurred_at}; "
                       f"the fold counted {work.failures})"),
                item.key + "/adopted", item.time)

    # ---------------------------------------------------------------- the end

    def end(self, state: StateFile, trial: StateTrial) -> None:
        """Bring the trial to the newest snapshot's status and count, where the log lags."""
        work = self.work
        plan = self.plan
        plan.ray_status, plan.ray_failures = trial.status, trial.ray_failures
        when = trial.last_result_time
        key = f"end@{state.name}:{trial.status}"
        try:
            if trial.status == "TERMINATED":
                if work.status is Status.RUNNING:
                    self._emit(TrialCompleted(), key, when)
                elif work.status in (Status.PENDING, Status.PAUSED, Status.RESTORING):
                    self._emit(TrialStopped(reason=ENDED), key, when)
            elif trial.status == "PAUSED" and work.status is Status.RUNNING:
                self._emit(TrialPaused(), key, when)
            if trial.ray_failures > work.failures and work.status is not Status.NEW:
                self._emit(CountersAdopted(
                    failures=trial.ray_failures, preemptions=work.preemptions,
                    source=f"Ray's experiment state ({state.name}: num_failures "
                           f"{trial.ray_failures}; error.txt holds fewer failures)"),
                    f"adopt@{state.name}:{trial.ray_failures}", when)
        except InvalidTransitionError as exc:
            plan.late.append(f"Ray's final status {trial.status} ({exc})")


def _describe(item: Item) -> str:
    if item.kind == "failure" and item.failure is not None:
        return (f"Failure # {item.failure.number} at {item.failure.occurred_at} "
                f"(error.txt block {item.failure.ordinal})")
    if item.kind == "checkpoint":
        return f"checkpoint {item.checkpoint}"
    if item.kind in ("start", "first") and item.attempt is not None:
        return f"the attempt from iteration {item.attempt.first.iteration}"
    return item.kind


def summarise(plans: Iterable[TrialPlan]) -> dict[str, int]:
    """How many events of each type the plans append."""
    return dict(Counter(e.event.type_name for plan in plans for e in plan.events))
