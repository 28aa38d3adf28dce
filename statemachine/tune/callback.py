"""``EventLogCallback``: one line in a Tune driver records every trial's life in the event log.

``RunConfig(callbacks=[EventLogCallback()])`` records each trial's start, restore, restore
success, checkpoint, pause, resume, failure (typed, with its cause), completion and stop; keeps
the failure and restore-failure budgets across driver restarts (``Tuner.restore``); and makes
Ray follow the retry policy's decisions, including the extras Ray does not have
(``restart_from_scratch``, ``previous_checkpoint``, a preemption budget, fatal exception types).

Nothing this callback does may raise into Tune (an exception escaping a hook aborts the whole
run): every hook reports its own errors and carries on. The callback is pickled into the
experiment state; the open log is not pickled and is reopened lazily.

The callback only wires Tune's hooks and the seam's reports to the domain and the log: what
to record after ``Tuner.restore`` is :func:`statemachine.tune.reconcile.reconcile`, and every
read or write of Ray's ``Trial`` goes through :mod:`statemachine.tune.ray_surface`.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ray.tune import Callback

from statemachine.domain.events import (
    CheckpointSaved,
    CheckpointsDiscarded,
    Event,
    ExperimentRenamed,
    FirstResult,
    NodeAvoidanceDropped,
    NodesAvoided,
    RestoreSucceeded,
    TrialAdded,
    TrialCompleted,
    TrialFailed,
    TrialPaused,
    TrialRecreated,
    TrialReset,
    TrialResumed,
    TrialStarted,
    TrialStopped,
)
from statemachine.domain.machine import TransitionRecord
from statemachine.domain.nodes import NodeRef
from statemachine.domain.policy import RetryPolicy
from statemachine.domain.rules import failure_in_restore
from statemachine.domain.state import TrialState
from statemachine.domain.status import Decision, Status
from statemachine.log import ExperimentLog
from statemachine.log.credentials import describe_url, redact_uri
from statemachine.log.records import storable_name
from statemachine.tune import checkpoints, errorfile, seam, secret_url
from statemachine.tune import ray_surface as surface
from statemachine.tune.callback_arguments import check_busy_timeout, check_policy, checked_url
from statemachine.tune.compat import check_ray
from statemachine.tune.log_sync import LogSync
from statemachine.tune.ray_errors import classify_ray
from statemachine.tune.reconcile import (
    RAY_ERROR,
    RAY_PAUSED,
    RAY_PENDING,
    RAY_TERMINATED,
    REUSED_ID,
    end_event,
    reconcile,
)
from statemachine.tune.recorder import Recorder
from statemachine.tune.store_url import (
    default_db_path,
    log_sync_for,
    resolve_url,
    warn_if_network_filesystem,
)

logger = logging.getLogger(__name__)

_F = TypeVar("_F", bound=Callable[..., Any])
#: How long the end of an experiment waits for the last upload of the log's copy.
SYNC_CLOSE_TIMEOUT_S = 60.0
_printed_urls: set[str] = set()
_said_unsupported: set[str] = set()
_said_no_seam = False
#: How often (seconds) waiting retries are checked against the bounded wait and the nodes.
_AVOID_CHECK_S = 1.0


def _never_raises(method: _F) -> _F:
    """Report any exception of a hook instead of letting it abort the Tune run."""

    @functools.wraps(method)
    def guarded(self: EventLogCallback, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except Exception:  # an escaping exception aborts the whole run
            self.hook_errors += 1
            logger.exception("statemachine: %s failed; the run continues", method.__name__)
            return None

    return guarded  # type: ignore[return-value]


def _json_safe(config: Any) -> dict[str, Any]:
    """A JSON-safe copy of a trial config (anything unusual becomes its ``repr``)."""
    try:
        data = json.loads(json.dumps(config, default=repr, sort_keys=True))
    except (TypeError, ValueError):
        return {"repr": repr(config)}
    if not isinstance(data, dict):
        return {"value": data}
    return {str(key): value for key, value in data.items()}


class EventLogCallback(Callback):
    """Record every trial's lifecycle in the event log and keep its budgets durable.

    Args:
        url: the store (``sqlite:///path.db``, ``postgresql+psycopg://...`` or a ``.db``
            path). Default: ``$STATEMACHINE_DB_URL``, else ``statemachine.db`` in the
            experiment's folder (printed once when opened).
        policy: the :class:`~statemachine.RetryPolicy` in force. Default: Ray's own
            (``TUNE_RESTORE_RETRY_NUM``, ``RAY_TRAIN_COUNT_PREEMPTION_AS_FAILURE`` and the
            run's ``FailureConfig.max_failures``).
        busy_timeout_ms: how long one write waits for another process's SQLite write lock
            before it counts as failed (and is retried later). Default: the log's own
            (10 s); lower it so a locked log never holds up Tune's loop that long.

    Raises:
        ConfigurationError: an argument that can never work (a database other than SQLite
            and PostgreSQL, a storage URI or a folder as ``url``, a ``busy_timeout_ms`` that
            is not a whole number of milliseconds, a ``policy`` that is not a
            ``RetryPolicy``), when the callback is made: before Ray starts.

    Attributes (counts for this driver process):
        events_recorded, events_unwritten, write_failures, events_rejected, hook_errors.
    """

    def __init__(self, url: str | os.PathLike[str] | None = None,
                 policy: RetryPolicy | None = None, *,
                 busy_timeout_ms: int | None = None) -> None:
        check_ray()
        # Here, not at the first trial: an argument that can never work must stop the
        # script before Ray starts, not leave a run going on unrecorded.
        check_policy(policy)
        check_busy_timeout(busy_timeout_ms)
        self.url = checked_url(url)
        self.policy = policy
        self.busy_timeout_ms = busy_timeout_ms
        self._reset_runtime()

    # ------------------------------------------------------------------ pickling

    def _reset_runtime(self) -> None:
        self.hook_errors = 0
        self.store_url: str | None = None
        self.experiment: str | None = None
        self._recorder: Recorder | None = None
        self._policy_in_force: RetryPolicy | None = None
        self._reconciled = False
        # "restore" when Tune's first step already holds trials (Tuner.restore loaded them
        # from the experiment state), "fresh" when it holds none (Tuner.fit, even one that
        # reuses an experiment's name); None until that first step
        self._session_kind: str | None = None
        self._trials_seen = 0
        self._recover: dict[str, bool] = {}
        self._maybe_stopped: dict[str, Any] = {}
        # where each trial's current actor was placed: (actor id, node)
        self._started: dict[str, tuple[str | None, NodeRef | None]] = {}
        # trials started whose first result of that attempt has not come yet
        self._awaiting_result: set[str] = set()
        # trials whose retry waits for a node outside their exclusion: since (monotonic)
        self._avoiding: dict[str, float] = {}
        self._avoid_checked = 0.0
        self._selector_problem: str | None = None
        self._log_sync: LogSync | None = None
        # the Ray Trial object recorded behind each id (a new object: maybe a new trial)
        self._objects: dict[str, int] = {}
        self._seam_listening = False
        self._failures_recorded: set[str] = set()
        self._finished = False  # on_experiment_end ran: the next run starts afresh

    def __getstate__(self) -> dict[str, Any]:
        # Never a password in the experiment state (tuner.pkl goes to shared storage): the
        # URL is saved without it and finds it again in the environment (secret_url).
        return {**secret_url.saved(self.url), "policy": self.policy,
                "busy_timeout_ms": self.busy_timeout_ms}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.url = secret_url.restored(state)
        self.policy = state["policy"]
        self.busy_timeout_ms = state.get("busy_timeout_ms")
        self._reset_runtime()

    # ------------------------------------------------------------------ counts

    @property
    def events_recorded(self) -> int:
        """Events written to the log by this driver."""
        return self._recorder.recorded if self._recorder else 0

    @property
    def events_unwritten(self) -> int:
        """Events that could not be written (yet)."""
        return self._recorder.unwritten if self._recorder else 0

    @property
    def write_failures(self) -> int:
        """Failed attempts to open the log or write to it."""
        return self._recorder.write_failures if self._recorder else 0

    @property
    def events_rejected(self) -> int:
        """Events the fold refused (not valid in the trial's folded state)."""
        return self._recorder.rejected if self._recorder else 0

    def summary(self) -> dict[str, int]:
        """The counts above as a dict (also logged at the end of the experiment)."""
        counts = self._recorder.summary() if self._recorder else {
            "recorded": 0, "unwritten": 0, "write_failures": 0, "rejected": 0,
        }
        sync = self._log_sync.stats if self._log_sync else None
        uploads = {"uploads": sync.uploads, "upload_failures": sync.failures} if sync else {}
        return {**counts, "hook_errors": self.hook_errors, **uploads}

    # ------------------------------------------------------------------ the log

    def _ensure_log(self, trial: Any, trials: list[Any] | None = None) -> Recorder:
        """Open the log at the first trial; ``trials``: every trial of the driver's first
        step (restored ones let a moved or renamed experiment continue its history)."""
        if self._finished:
            self._start_again()
        if self._recorder is not None:
            return self._recorder
        # The restored trials that ran: a log that recorded the experiment has every one.
        continue_ids = [surface.trial_id(t) for t in trials or [] if not surface.never_ran(t)]
        self.experiment = surface.experiment_name(trial)
        policy = self.policy or RetryPolicy.from_env(max_failures=surface.max_failures(trial))
        self._policy_in_force = policy
        url = resolve_url(self.url, trial)
        self.store_url = describe_url(url)  # for messages: never the password
        # A folder name that is not valid UTF-8 cannot be stored or printed as it is.
        experiment = storable_name(self.experiment)
        sync = self._log_sync = log_sync_for(self.url, trial)
        if url not in _printed_urls:
            _printed_urls.add(url)
            follows = f" (a copy follows the experiment to {sync.remote.label})" if sync else ""
            print(f"statemachine: recording trial events of {experiment} to "
                  f"{self.store_url}{follows}", flush=True)
        warn_if_network_filesystem(url)
        storage_path = redact_uri(surface.experiment_path(trial))
        options: dict[str, Any] = {}
        if self.busy_timeout_ms is not None:
            options["busy_timeout_ms"] = int(self.busy_timeout_ms)

        def open_log() -> Any:
            if sync is not None:
                sync.prepare()  # the newest log from storage, before the counters are read
            return ExperimentLog.open(url, experiment, policy, storage_path=storage_path,
                                      session_kind=self._session_kind,
                                      continue_trials=continue_ids, **options)

        self._recorder = Recorder(open_log, policy, background=True)
        self._listen()  # a TuneController built directly never called setup()
        self._recorder.open()
        if policy.avoid_failed_nodes:
            self._prepare_avoidance()
        return self._recorder

    def _listen(self) -> None:
        """Install the error seam and listen to this run's trials (idempotent)."""
        if not self._seam_listening:
            seam.install()
            seam.add_listener(self)
            self._seam_listening = True

    def _prepare_avoidance(self) -> None:
        """Check once that this Ray can place by node label; say so once if it cannot."""
        self._selector_problem = surface.selector_support()
        if self._selector_problem is None:
            surface.track_controller()
        elif self._selector_problem not in _said_unsupported:
            _said_unsupported.add(self._selector_problem)
            logger.warning(
                "statemachine: RetryPolicy(avoid_failed_nodes=True) cannot be applied: %s; "
                "restore retries run where Ray places them", self._selector_problem)

    @property
    def policy_in_force(self) -> RetryPolicy:
        """The policy decisions are made with (known once the first trial is seen)."""
        return self._policy_in_force or self.policy or RetryPolicy.from_env()

    def _state(self, trial: Any) -> TrialState | None:
        return self._recorder.state(surface.trial_id(trial)) if self._recorder else None

    def _track(self, trial: Any) -> TrialState | None:
        """Make sure the trial is in the log (``TrialAdded``); returns its state."""
        recorder = self._ensure_log(trial)
        trial_id = surface.trial_id(trial)
        state = recorder.state(trial_id)
        if state is None:
            recorder.record(trial_id, TrialAdded(config=_json_safe(surface.config(trial))))
            state = recorder.state(trial_id)
        elif (self._reconciled and self._objects.get(trial_id) != id(trial)
                and state.status.is_terminal and surface.never_ran(trial)):
            # Another Ray trial behind the id of an ended one: a new incarnation of the id.
            logger.warning("statemachine: trial %s is a new trial behind the id of one that "
                           "ended %s: recorded as a new incarnation", trial_id, state.status)
            recorder.record(trial_id, TrialRecreated(config=_json_safe(surface.config(trial)),
                                                     reason=REUSED_ID))
            state = recorder.state(trial_id)
        if self._reconciled:
            self._objects[trial_id] = id(trial)
        return state

    def _record(self, trial: Any, event: Event) -> TransitionRecord | None:
        self._track(trial)
        assert self._recorder is not None
        return self._recorder.record(surface.trial_id(trial), event)

    # ------------------------------------------------------------------ seam listener

    def owns(self, trial: Any) -> bool:
        """Whether ``trial`` belongs to this callback's experiment."""
        if self.experiment is None:
            return True
        return surface.experiment_name(trial) == self.experiment

    @_never_raises
    def trial_failed(self, trial: Any, exc: BaseException | None, restoring: bool) -> None:
        """Record the typed failure and make Ray follow the fold's decision."""
        self._track(trial)
        self._awaiting_result.discard(surface.trial_id(trial))  # this attempt is over
        before = self._state(trial)
        known_checkpoints = before.checkpoints if before else ()
        policy = self.policy_in_force
        if exc is None:
            exc = RuntimeError("Ray reported a failure without an exception")
        phase = Status.RESTORING if restoring else Status.RUNNING
        if before is not None and failure_in_restore(before, policy):
            phase = Status.RESTORING  # before the attempt's first result: still its restore
        error = classify_ray(exc, phase, policy.fatal_exception_types)
        node = surface.failure_node(trial, exc, self._started.pop(surface.trial_id(trial), None))
        record = self._record(trial, TrialFailed(error=error, node=node))
        self._failures_recorded.add(surface.trial_id(trial))
        if record is None:
            return  # refused by the fold: Ray's own accounting stands
        self._steer(trial, record, known_checkpoints)
        if policy.avoid_failed_nodes:
            self._place_retry(trial, record)
        self._upload_log(changed_only=True)  # a decision: the storage's copy must hold it
        error_file = surface.error_file(trial)
        if error_file:
            try:
                errorfile.rewrite_last_header(error_file, record, policy)
            except OSError as err:
                logger.warning("statemachine: cannot rewrite %s: %s", error_file, err)

    def _steer(self, trial: Any, record: TransitionRecord,
               known_checkpoints: tuple[str, ...]) -> None:
        """Put the fold's counters and decision into Ray's trial."""
        counters = record.counters
        surface.set_num_failures(trial, counters.failures)
        surface.set_restore_failures(trial, counters.restore_failures)
        self._recover[surface.trial_id(trial)] = record.status_after is Status.PENDING
        if record.decision is Decision.RESTART_FROM_SCRATCH:
            self._restart_from_scratch(trial, known_checkpoints)
        elif record.decision is Decision.PREVIOUS_CHECKPOINT:
            after = self._state(trial)
            target = after.latest_checkpoint if after else None
            kept = set(after.checkpoints) if after else set()
            dropped = [c for c in (*known_checkpoints, surface.current_checkpoint(trial))
                       if c and c not in kept]
            surface.restore_from(trial, target, dropped)
            logger.warning("statemachine: trial %s falls back to checkpoint %s",
                           surface.trial_id(trial), target or "none (from scratch)")

    def _restart_from_scratch(self, trial: Any, known_checkpoints: tuple[str, ...]) -> None:
        forgotten = surface.forget_checkpoints(trial)
        paths = list(dict.fromkeys([*known_checkpoints, *forgotten]))
        deleted = False
        if self.policy_in_force.delete_discarded_checkpoints and paths:
            report = checkpoints.delete_checkpoint_dirs(trial, paths)
            deleted = report.all_gone
        logger.warning(
            "statemachine: trial %s restarts from scratch (restore retries spent); "
            "%d checkpoint(s) discarded%s", surface.trial_id(trial), len(paths),
            ", folders deleted" if deleted else "",
        )
        self._record(trial, CheckpointsDiscarded(
            checkpoints=tuple(paths), deleted=deleted,
            reason="restore retries spent: restart_from_scratch",
        ))

    # ------------------------------------------------------------------ avoiding failed nodes

    def _unexclude(self, trial: Any) -> None:
        """The trial's own resources again (no node excluded)."""
        if self._selector_problem is None:
            surface.set_factory(trial, surface.without_exclusion(surface.factory(trial)))

    def _place_retry(self, trial: Any, record: TransitionRecord) -> None:
        """Place the trial's retry away from the nodes where its restore episode failed."""
        trial_id = surface.trial_id(trial)
        state = self._state(trial)
        nodes = state.excluded_nodes if state is not None else ()
        if record.status_after is not Status.PENDING or not nodes:
            self._avoiding.pop(trial_id, None)
            self._unexclude(trial)
            return
        if self._selector_problem is not None:
            self._record(trial, NodeAvoidanceDropped(nodes=nodes, reason="unsupported"))
            return
        if not surface.can_host_elsewhere(trial, nodes):
            self._drop_avoidance(trial, "no_other_node", 0.0)
            return
        excluded = surface.with_exclusion(surface.factory(trial), nodes)
        if excluded is None:
            logger.warning("statemachine: trial %s selects its nodes by %s itself; its retry is "
                           "placed by that selector", trial_id, surface.NODE_ID_LABEL)
            self._record(trial, NodeAvoidanceDropped(nodes=nodes, reason="unsupported"))
            return
        if surface.set_factory(trial, excluded):
            self._avoiding[trial_id] = time.monotonic()
            self._record(trial, NodesAvoided(nodes=nodes))
            logger.warning("statemachine: trial %s retries its restore away from node(s) %s",
                           trial_id, ", ".join(n[:12] for n in nodes))

    def _drop_avoidance(self, trial: Any, reason: str, waited_s: float) -> bool:
        """Let the trial run on any node again; record why. False if Tune would not let go."""
        state = self._state(trial)
        nodes = state.excluded_nodes if state is not None else ()
        if not surface.set_factory(trial, surface.without_exclusion(surface.factory(trial))):
            return False
        trial_id = surface.trial_id(trial)
        self._avoiding.pop(trial_id, None)
        self._record(trial, NodeAvoidanceDropped(nodes=nodes, reason=reason,
                                                 waited_ms=int(waited_s * 1000)))
        logger.warning("statemachine: trial %s: %s; its retry may run on any node", trial_id,
                       "no other node can host it" if reason == "no_other_node"
                       else f"no other node took it within {waited_s:.0f} s")
        return True

    def _check_avoidance(self, trials: list[Any]) -> None:
        """Bounded wait: a retry still waiting for another node runs anywhere once the wait is
        over, or at once when no live node outside its exclusion can host it."""
        now = time.monotonic()
        if not self._avoiding or now - self._avoid_checked < _AVOID_CHECK_S:
            return
        self._avoid_checked = now
        limit = self.policy_in_force.avoid_nodes_wait_s
        for trial in trials:
            trial_id = surface.trial_id(trial)
            since = self._avoiding.get(trial_id)
            if since is None:
                continue
            ray_status = surface.status(trial)
            if ray_status != RAY_PENDING:
                if ray_status in (RAY_TERMINATED, RAY_ERROR):
                    self._avoiding.pop(trial_id, None)
                continue
            state = self._state(trial)
            nodes = state.excluded_nodes if state is not None else ()
            if not nodes:
                self._avoiding.pop(trial_id, None)
                continue
            waited = now - since
            if not surface.can_host_elsewhere(trial, nodes):
                self._drop_avoidance(trial, "no_other_node", waited)
            elif waited >= limit:
                self._drop_avoidance(trial, "timeout", waited)

    def _restore_placement(self, trial: Any) -> None:
        """After ``Tuner.restore``: the exclusion in the log is the one in force in Ray."""
        if self._selector_problem is not None:
            return
        state = self._state(trial)
        current = surface.factory(trial)
        if current is None:
            return
        wanted = state.excluded_nodes if state is not None else ()
        if wanted and surface.status(trial) == RAY_PENDING:
            excluded = surface.with_exclusion(current, wanted)
            if excluded is not None and surface.set_factory(trial, excluded):
                self._avoiding[surface.trial_id(trial)] = time.monotonic()
                logger.warning("statemachine: trial %s: its restore retry still avoids "
                               "node(s) %s (from the event log)", surface.trial_id(trial),
                               ", ".join(n[:12] for n in wanted))
        elif surface.excluded_by(current):
            surface.set_factory(trial, surface.without_exclusion(current))

    @_never_raises
    def trial_restored(self, trial: Any) -> None:
        """The trial restored from its checkpoint (its restore episode, and any exclusion of
        failed nodes, is over)."""
        self._record(trial, RestoreSucceeded())
        if self.policy_in_force.avoid_failed_nodes:
            self._unexclude(trial)

    @_never_raises
    def status_changed(self, trial: Any, old: str | None, new: str) -> None:
        """Record pauses, resumes, resets and stops (no callback hook exists for them)."""
        state = self._state(trial)
        if state is None:
            return
        trial_id = surface.trial_id(trial)
        if new == RAY_TERMINATED and state.status.is_live:
            # Ray pauses a trial by stopping it (TERMINATED) and then setting PAUSED: decide
            # at the step's end.
            self._maybe_stopped[trial_id] = trial
            return
        self._maybe_stopped.pop(trial_id, None)
        if new == RAY_PAUSED and state.status is Status.RUNNING:
            self._record(trial, TrialPaused())
        elif new == RAY_PENDING and state.status is Status.PAUSED:
            self._record(trial, TrialResumed())
        elif new == RAY_PENDING and state.status.is_terminal:
            self._record(trial, TrialReset(from_scratch=False))

    @_never_raises
    def recover_decision(self, trial: Any) -> bool | None:
        """Our answer to ``should_recover`` after the failure just recorded."""
        return self._recover.pop(surface.trial_id(trial), None)

    def _settle_stops(self) -> None:
        for trial_id, trial in list(self._maybe_stopped.items()):
            self._maybe_stopped.pop(trial_id, None)
            state = self._state(trial)
            if (surface.status(trial) == RAY_TERMINATED and state is not None
                    and state.status.is_live):
                self._record(trial, TrialStopped(reason="stopped by Tune"))

    # ------------------------------------------------------------------ after Tuner.restore

    def _reconcile(self, trials: list[Any]) -> None:
        """First step of a driver: align the log and Ray's restored trials, put budgets back."""
        if not trials:
            return
        recorder = self._ensure_log(trials[0], trials)
        renamed = getattr(recorder.log, "renamed_from", None)
        if renamed is not None:
            self._record_rename(trials, renamed)
        for trial in trials:
            known = self._ensure_log(trial).state(surface.trial_id(trial)) is not None
            state = self._track(trial)
            if state is None:
                continue
            trial_id = surface.trial_id(trial)
            self._objects[trial_id] = id(trial)
            ray_failures = surface.num_failures(trial)
            current = surface.current_checkpoint(trial)
            plan = reconcile(state, surface.status(trial), ray_failures, current, known=known,
                             ray_fresh=surface.never_ran(trial))
            if plan.event is not None:
                self._record(trial, plan.event)
            if plan.adopted is not None:
                logger.warning(
                    "statemachine: trial %s: num_failures %d adopted from %s (the event log "
                    "%s)", trial_id, plan.adopted.failures, plan.adopted.source,
                    f"counted {state.failures}" if known else "did not know the trial")
                self._record(trial, plan.adopted)
            elif plan.error_in_ray_only:
                logger.warning("statemachine: trial %s is ERROR in Ray but %s in the log",
                               trial_id, state.status)
            if plan.failures is not None:
                logger.warning(
                    "statemachine: trial %s: num_failures %d from the event log (Ray's "
                    "experiment state said %d)", trial_id, plan.failures, ray_failures,
                )
                surface.set_num_failures(trial, plan.failures)
            if plan.restore_failures is not None:
                logger.warning(
                    "statemachine: trial %s: %d restore failure(s) of checkpoint %s already "
                    "spent before the driver restarted", trial_id, plan.restore_failures,
                    current,
                )
                surface.set_restore_failures(trial, plan.restore_failures)
            if self.policy_in_force.avoid_failed_nodes:
                self._restore_placement(trial)

    def _record_rename(self, trials: list[Any], renamed: tuple[str, str | None]) -> None:
        """The experiment continues under its new name: say so in every restored trial."""
        old_name, old_path = renamed
        new_path = redact_uri(surface.experiment_path(trials[0]))
        print(f"statemachine: experiment {storable_name(old_name)} continues as "
              f"{self.experiment} (moved or renamed; its event log history is kept)",
              flush=True)
        assert self._recorder is not None
        for trial in trials:
            if self._recorder.state(surface.trial_id(trial)) is not None:
                self._record(trial, ExperimentRenamed(
                    old_name=old_name, new_name=storable_name(self.experiment or ""),
                    old_storage_path=old_path, new_storage_path=new_path))

    # ------------------------------------------------------------------ Tune hooks

    @_never_raises
    def setup(self, stop: Any = None, num_samples: Any = None,
              total_num_samples: Any = None, **info: Any) -> None:
        """Install the error seam and listen to this run's trials."""
        if self._recorder is not None:
            self._recorder.close()
            self._close_log_sync()
            self._reset_runtime()
        self._listen()

    @_never_raises
    def on_step_begin(self, iteration: int, trials: list[Any], **info: Any) -> None:
        """On the driver's first step, reconcile restored trials; track new ones."""
        if self._finished:
            self._start_again()
        if not self._reconciled:
            self._session_kind = "restore" if trials else "fresh"
            try:
                self._reconcile(trials)
            finally:  # once: a failed reconcile is reported, never retried every step
                self._reconciled = True
            self._upload_log()
        self._track_new(trials)
        if self._avoiding:
            self._check_avoidance(trials)

    def _track_new(self, trials: list[Any]) -> None:
        """Add trials created since the last look (Tune only appends to its list)."""
        if len(trials) != self._trials_seen:
            for trial in trials:
                self._track(trial)
            self._trials_seen = len(trials)

    @_never_raises
    def on_step_end(self, iteration: int, trials: list[Any], **info: Any) -> None:
        """Settle pending stops, forget unused recover answers, retry queued writes."""
        self._settle_stops()
        self._recover.clear()
        self._failures_recorded.clear()
        if self._recorder is not None:
            self._recorder.flush()

    @_never_raises
    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any,
                       **info: Any) -> None:
        """An actor started for the trial; it restores when Ray has a checkpoint for it."""
        trial_id = surface.trial_id(trial)
        self._maybe_stopped.pop(trial_id, None)
        started = surface.started_actor(trial)
        self._started[trial_id] = started
        self._avoiding.pop(trial_id, None)  # placed: the wait is over
        self._awaiting_result.add(trial_id)
        self._record(trial, TrialStarted(restore_from=surface.current_checkpoint(trial),
                                         node=started[1]))

    @_never_raises
    def on_trial_recover(self, iteration: int, trials: list[Any], trial: Any,
                         **info: Any) -> None:
        """Ray retries the trial after a failure (recorded by the seam)."""
        self._check_failure_seen(trial)

    @_never_raises
    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any,
                       **info: Any) -> None:
        """The trial failed for good (recorded by the seam)."""
        self._check_failure_seen(trial)

    def _check_failure_seen(self, trial: Any) -> None:
        """A failure Tune reports that the seam did not: say so once (it is not recorded)."""
        if surface.trial_id(trial) in self._failures_recorded:
            return
        global _said_no_seam
        if not _said_no_seam:
            _said_no_seam = True
            logger.warning(
                "statemachine: a failure of trial %s reached Tune's callbacks but not the "
                "error seam (Trial methods not wrapped: was the callback given to this "
                "TuneController after it started?); such failures are not in the event log",
                surface.trial_id(trial))

    @_never_raises
    def on_trial_result(self, iteration: int, trials: list[Any], trial: Any,
                        result: dict[str, Any], **info: Any) -> None:
        """The first result of each attempt is recorded (``FirstResult``); later ones not.

        It ends the stretch in which a failure can still be one of the user's restore
        (``restoring()``, ``RetryPolicy(restore_phase="until_first_report")``).
        """
        trial_id = surface.trial_id(trial)
        if trial_id not in self._awaiting_result:
            return
        self._awaiting_result.discard(trial_id)
        iteration_done = result.get("training_iteration") if isinstance(result, dict) else None
        self._record(trial, FirstResult(
            iteration=iteration_done if type(iteration_done) is int else None))

    @_never_raises
    def on_checkpoint(self, iteration: int, trials: list[Any], trial: Any, checkpoint: Any,
                      **info: Any) -> None:
        """The trial saved a checkpoint."""
        self._record(trial, CheckpointSaved(checkpoint=surface.checkpoint_path(checkpoint)))

    @_never_raises
    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any,
                          **info: Any) -> None:
        """The trial finished (RUNNING) or was stopped before it could (otherwise)."""
        state = self._track(trial)
        if state is None or not state.status.is_live:
            return
        if state.status is Status.RUNNING:
            self._record(trial, TrialCompleted())
        else:
            self._record(trial, TrialStopped(reason=f"stopped while {state.status.value}"))

    @_never_raises
    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        """Write what is queued, report what could not be written, close the log."""
        self._settle_stops()
        self._track_new(trials)
        self._align_end(trials)
        seam.remove_listener(self)
        self._seam_listening = False
        recorder = self._recorder
        if recorder is None:
            return
        recorder.flush(force=True)
        for trial in trials:
            trial_id, ray_status = surface.trial_id(trial), surface.status(trial)
            state = recorder.state(trial_id)
            if state is not None and state.status.value != ray_status:
                logger.warning("statemachine: trial %s ends %s in Ray but %s in the log",
                               trial_id, ray_status, state.status)
        summary = self.summary()
        where = ""
        if recorder.unwritten or recorder.rejected:
            target = self._unwritten_path(trials)
            try:
                where = f"saved to {recorder.save_unwritten(target)}"
            except OSError as exc:
                where = f"they could not be saved to {target} either ({exc})"
        # INFO when everything is in the log; otherwise WARNING or worse, naming the file
        if recorder.unwritten:
            logger.error("statemachine: %d event(s) could not be written to %s; %s (%s)",
                         recorder.unwritten, self.store_url, where, summary)
        elif recorder.rejected:
            logger.warning(
                "statemachine: %d event(s) refused by the state machine were not written to "
                "%s; %s (%s)", recorder.rejected, self.store_url, where, summary)
        elif self.hook_errors:
            logger.warning(
                "statemachine: %d callback hook(s) failed (logged above): the log at %s may "
                "miss events (%s)", self.hook_errors, self.store_url, summary)
        else:
            logger.info("statemachine: event log summary: %s", summary)
        recorder.close(clean=not recorder.unwritten)
        self._close_log_sync()
        self._finished = True

    def _start_again(self) -> None:
        """The same callback in a new run without ``setup()`` (a ``TuneController`` built
        directly): a new driver session, as ``setup()`` starts for a ``Tuner``."""
        self._reset_runtime()
    def _align_end(self, trials: list[Any]) -> None:
        """However the experiment ended (fail_fast, a stopper, a time budget, SIGINT), the log
        ends with Ray's status for every trial Ray leaves behind."""
        if self._recorder is None:
            return
        for trial in trials:
            state = self._state(trial)
            if state is None:
                continue
            event = end_event(state.status, surface.status(trial))
            if event is not None:
                self._record(trial, event)

    # ------------------------------------------------------------------ the log's copy

    def _upload_log(self, *, changed_only: bool = False) -> None:
        """Ask for an upload of the log to the experiment's storage (returns at once);
        ``changed_only``: not when this driver wrote nothing since the last request."""
        if self._log_sync is not None and self._recorder is not None:
            self._recorder.flush()
            self._log_sync.request(self._recorder.recorded if changed_only else None)

    @_never_raises
    def get_state(self) -> dict[str, Any] | None:
        """Tune's experiment checkpoint: the log's copy goes to storage with it.

        Nothing is added to Tune's callback state (``None``); see :meth:`__getstate__`.
        """
        self._upload_log(changed_only=True)
        return None

    def _close_log_sync(self) -> None:
        sync, self._log_sync = self._log_sync, None
        if sync is not None:
            sync.request()
            sync.close(timeout=SYNC_CLOSE_TIMEOUT_S)

    def _unwritten_path(self, trials: list[Any]) -> Path:
        folder = Path.cwd()
        if trials:
            folder = default_db_path(trials[0]).parent
        return folder / f"statemachine-unwritten-{os.getpid()}.jsonl"

