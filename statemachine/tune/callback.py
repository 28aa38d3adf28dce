"""``EventLogCallback``: one line in a Tune driver records every trial's life in the event log.

``RunConfig(callbacks=[EventLogCallback()])`` records each trial's start, restore, restore
success, checkpoint, pause, resume, failure (typed, with its cause), completion and stop; keeps
the failure and restore-failure budgets across driver restarts (``Tuner.restore``); and makes
Ray follow the retry policy's decisions, including the extras Ray does not have
(``restart_from_scratch``, ``previous_checkpoint``, a preemption budget, fatal exception types).
Nothing it does may raise into Tune (that aborts the run): every hook reports its own errors
and carries on. It is pickled into the experiment state; the open log is reopened lazily.

This module is the hooks and the session's lifecycle: what each Tune hook and each report of
the error seam (:mod:`.seam`) records, and when. Every other job has its module: the log and
its storage copy (:mod:`.log_session`), which Ray trial is which in the log (:mod:`.tracking`),
each trial's attempt and why its actor died (:mod:`.attempts`), hookless status changes
(:mod:`.status_changes`), Ray following a decision (:mod:`.steering`), node avoidance
(:mod:`.avoidance`), the trials ``Tuner.restore`` brought back (:mod:`.after_restore`,
:mod:`.callback_resume`), every
read or write of Ray's objects (:mod:`.ray_surface`), the counts it keeps
(:mod:`.callback_counts`).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from ray.tune import Callback

from statemachine.domain.events import (
    CheckpointSaved,
    Event,
    RestoreSucceeded,
    TrialCompleted,
    TrialStarted,
    TrialStopped,
)
from statemachine.domain.machine import TransitionRecord
from statemachine.domain.policy import RetryPolicy
from statemachine.domain.state import TrialState
from statemachine.domain.status import Status
from statemachine.tune import errorfile, seam, secret_url
from statemachine.tune.after_restore import align_restored_trials
from statemachine.tune.attempts import Attempts
from statemachine.tune.avoidance import NodeAvoidance
from statemachine.tune.callback_arguments import (
    check_busy_timeout,
    check_flag,
    check_policy,
    checked_url,
)
from statemachine.tune.callback_counts import CallbackCounts
from statemachine.tune.callback_resume import ResumeHooks, install_hooks
from statemachine.tune.compat import check_ray
from statemachine.tune.hook_guard import never_raises as _never_raises
from statemachine.tune.hook_guard import tune_trials as _trials
from statemachine.tune.log_session import LogSession
from statemachine.tune.ray_surface import checkpoint_manager as ray_checkpoints
from statemachine.tune.ray_surface import trials as ray_trial
from statemachine.tune.recorder import Recorder
from statemachine.tune.resume_from_log import save_error, save_last_result
from statemachine.tune.status_changes import StatusChanges
from statemachine.tune.steering import Steering
from statemachine.tune.tracking import TrialTracker

logger = logging.getLogger(__name__)


class EventLogCallback(CallbackCounts, ResumeHooks, Callback):
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
        resume_from_log: after a driver crash, ``Tuner.restore`` resumes each trial whose
            whole history the log holds from what the log knows (an end, a newer checkpoint)
            instead of Ray's older saved state (default ``True``; see docs/tune.md).

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
                 busy_timeout_ms: int | None = None, resume_from_log: bool = True) -> None:
        check_ray()
        # Here, not at the first trial: an argument that can never work must stop the
        # script before Ray starts, not leave a run going on unrecorded.
        check_policy(policy)
        check_busy_timeout(busy_timeout_ms)
        check_flag("resume_from_log", resume_from_log)
        self.url = checked_url(url)
        self.policy = policy
        self.busy_timeout_ms = busy_timeout_ms
        self.resume_from_log = resume_from_log
        self._reset_runtime()

    # ------------------------------------------------------------------ pickling

    def _reset_runtime(self) -> None:
        self.hook_errors = 0
        self.store_url: str | None = None
        self.experiment: str | None = None
        self._session: LogSession | None = None
        # "restore" when Tune's first step already holds trials (Tuner.restore loaded them
        # from the experiment state), "fresh" when it holds none (Tuner.fit, even one that
        # reuses an experiment's name); None until that first step
        self._session_kind: str | None = None
        self._tracker = TrialTracker()
        self._steering = Steering(self._tracker)
        self._avoidance: NodeAvoidance | None = None  # when the policy asks for it
        self._status_changes = StatusChanges(self._tracker)
        self._attempts = Attempts()
        self._seam_listening = False
        # on_experiment_end ran: the next run starts a new driver session, as setup() does
        # for a Tuner (a TuneController built directly never calls setup())
        self._finished = False
        # the log was opened for Ray's requeue of restored trials, before setup()
        self._opened_for_requeue = False
        install_hooks()  # before Tuner.restore's controller resumes

    def __getstate__(self) -> dict[str, Any]:
        # Never a password in the experiment state (tuner.pkl goes to shared storage): the
        # URL is saved without it and finds it again in the environment (secret_url).
        return {**secret_url.saved(self.url), "policy": self.policy,
                "busy_timeout_ms": self.busy_timeout_ms,
                "resume_from_log": self.resume_from_log}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.url = secret_url.restored(state)
        self.policy = state["policy"]
        self.busy_timeout_ms = state.get("busy_timeout_ms")
        self.resume_from_log = state.get("resume_from_log", True)
        self._reset_runtime()

    # ------------------------------------------------------------------ the log

    def _ensure_log(self, trial: Any, trials: list[Any] | None = None) -> Recorder:
        """Open the log at the first trial; ``trials``: every trial of the driver's first
        step (restored ones let a moved or renamed experiment continue its history)."""
        if self._finished:
            self._reset_runtime()
        if self._session is not None:
            return self._session.recorder
        # The restored trials that ran: a log that recorded the experiment has every one.
        continue_ids = [ray_trial.trial_id(t) for t in trials or []
                        if not ray_trial.never_ran(t)]
        self.experiment = ray_trial.experiment_name(trial)
        session = self._session = LogSession(self.url, self.policy, self.busy_timeout_ms,
                                             trial, continue_ids, self._session_kind)
        self.store_url = session.store_url
        self._tracker.recorder = session.recorder
        self._listen()  # a TuneController built directly never called setup()
        session.recorder.open()
        if session.policy.avoid_failed_nodes:
            self._avoidance = NodeAvoidance(self._tracker, session.policy)
            self._avoidance.prepare()
        return session.recorder

    def _listen(self) -> None:
        """Install the error seam and listen to this run's trials (idempotent)."""
        if not self._seam_listening:
            seam.install()
            seam.add_listener(self)
            self._seam_listening = True

    def _track(self, trial: Any) -> TrialState | None:
        """Make sure the trial is in the log (``TrialAdded``); returns its state."""
        self._ensure_log(trial)
        return self._tracker.track(trial)

    def _record(self, trial: Any, event: Event) -> TransitionRecord | None:
        self._ensure_log(trial)
        return self._tracker.record(trial, event)

    def _track_new(self, trials: list[Any]) -> None:
        """Add trials created since the last look (Tune only appends to its list)."""
        if trials and self._tracker.has_new(trials):
            self._ensure_log(trials[0])
        self._tracker.track_new(trials)

    def _upload_log(self, *, changed_only: bool = False) -> None:
        if self._session is not None:
            self._session.upload(changed_only=changed_only)

    # ------------------------------------------------------------------ seam listener

    def owns(self, trial: Any) -> bool:
        """Whether ``trial`` belongs to this callback's experiment."""
        if self.experiment is None:
            return True
        return ray_trial.experiment_name(trial) == self.experiment

    @_never_raises
    def trial_failed(self, trial: Any, exc: BaseException | None, restoring: bool) -> None:
        """Record the typed failure and make Ray follow the fold's decision."""
        self._track(trial)
        before = self._tracker.state(trial)
        policy = self.policy_in_force
        failed = self._attempts.failure(trial, exc, restoring, before, policy)
        record = self._record(trial, failed)
        self._attempts.failure_recorded(trial, self._tracker.state(trial) if record else None)
        if record is None:
            return  # refused by the fold: Ray's own accounting stands
        self._steering.follow(trial, record, before.checkpoints if before else (), policy)
        if self._avoidance is not None:
            self._avoidance.place_retry(trial, record)
        self._upload_log(changed_only=True)  # a decision: the storage's copy must hold it
        error_file = ray_trial.error_file(trial)
        if error_file:
            try:
                errorfile.rewrite_last_header(error_file, record, policy)
            except OSError as err:
                logger.warning("statemachine: cannot rewrite %s: %s", error_file, err)

    @_never_raises
    def trial_restored(self, trial: Any) -> None:
        """The trial restored from its checkpoint (its restore episode, and any exclusion of
        failed nodes, is over)."""
        self._record(trial, RestoreSucceeded())
        if self._avoidance is not None:
            self._avoidance.restored(trial)

    @_never_raises
    def status_changed(self, trial: Any, old: str | None, new: str) -> None:
        """Record pauses, resumes, resets and stops (no callback hook exists for them)."""
        self._status_changes.changed(trial, new)

    @_never_raises
    def recover_decision(self, trial: Any) -> bool | None:
        """Our answer to ``should_recover`` after the failure just recorded."""
        return self._steering.recover_decision(trial)

    # ------------------------------------------------------------------ Tune hooks

    @_never_raises
    def setup(self, stop: Any = None, num_samples: Any = None,
              total_num_samples: Any = None, **info: Any) -> None:
        """Install the error seam and listen to this run's trials."""
        if self._session is not None and not self._opened_for_requeue:
            self._session.recorder.close()
            self._session.close_sync()
            self._reset_runtime()
        self._opened_for_requeue = False
        self._listen()

    @_never_raises
    def on_step_begin(self, iteration: int | None = None, trials: list[Any] | None = None,
                      **info: Any) -> None:
        """On the driver's first step, reconcile restored trials; track new ones."""
        trials = _trials(trials)
        if self._finished:
            self._reset_runtime()
        if not self._tracker.reconciled:
            self._session_kind = "restore" if trials else "fresh"
            try:
                if trials:
                    self._ensure_log(trials[0], trials)
                    align_restored_trials(trials, self._tracker, self.experiment or "",
                                          self._avoidance)
            finally:  # once: a failed reconcile is reported, never retried every step
                self._tracker.reconciled = True
            self._upload_log()
        self._track_new(trials)
        if self._avoidance is not None:
            self._avoidance.check(trials)

    @_never_raises
    def on_step_end(self, iteration: int | None = None, trials: list[Any] | None = None,
                    **info: Any) -> None:
        """Settle pending stops, forget unused recover answers, retry queued writes."""
        self._status_changes.settle()
        self._steering.forget_answers()
        self._attempts.step_ended(self._recorder)
        if self._recorder is not None:
            self._recorder.flush()

    @_never_raises
    def on_trial_start(self, iteration: int | None = None, trials: list[Any] | None = None,
                       trial: Any = None, **info: Any) -> None:
        """An actor started for the trial; it restores when Ray has a checkpoint for it."""
        if trial is None:
            return
        self._status_changes.started(trial)
        node = self._attempts.started(trial)
        if self._avoidance is not None:
            self._avoidance.started(trial)  # placed: the wait is over
        self._record(trial, TrialStarted(restore_from=ray_trial.current_checkpoint(trial),
                                         node=node))

    @_never_raises
    def on_trial_recover(self, iteration: int | None = None, trials: list[Any] | None = None,
                         trial: Any = None, **info: Any) -> None:
        """Ray retries the trial after a failure (recorded by the seam)."""
        if trial is None:
            return
        self._attempts.failure_reported(trial)

    @_never_raises
    def on_trial_error(self, iteration: int | None = None, trials: list[Any] | None = None,
                       trial: Any = None, **info: Any) -> None:
        """The trial failed for good (recorded by the seam)."""
        if trial is None:
            return
        self._attempts.failure_reported(trial)
        if self.resume_from_log:
            save_error(trial)

    @_never_raises
    def on_trial_result(self, iteration: int | None = None, trials: list[Any] | None = None,
                        trial: Any = None, result: dict[str, Any] | None = None,
                        **info: Any) -> None:
        """The first result of each attempt is recorded (``FirstResult``); later ones not.

        It ends the stretch in which a failure can still be one of the user's restore
        (``restoring()``, ``RetryPolicy(restore_phase="until_first_report")``).
        """
        if trial is None:
            return
        first = self._attempts.first_result(trial, result)
        if first is not None:
            self._record(trial, first)

    @_never_raises
    def on_checkpoint(self, iteration: int | None = None, trials: list[Any] | None = None,
                      trial: Any = None, checkpoint: Any = None, **info: Any) -> None:
        """The trial saved a checkpoint."""
        if trial is None or checkpoint is None:
            return
        self._record(trial, CheckpointSaved(
            checkpoint=ray_checkpoints.checkpoint_path(checkpoint),
            iteration=ray_trial.last_iteration(trial)))

    @_never_raises
    def on_trial_complete(self, iteration: int | None = None, trials: list[Any] | None = None,
                          trial: Any = None, **info: Any) -> None:
        """The trial finished (RUNNING) or was stopped before it could (otherwise)."""
        state = None if trial is None else self._track(trial)
        if state is None or not state.status.is_live:
            return
        if state.status is Status.RUNNING:
            if self.resume_from_log:
                save_last_result(trial)
            self._record(trial, TrialCompleted())
        else:
            self._record(trial, TrialStopped(reason=f"stopped while {state.status.value}"))

    @_never_raises
    def on_experiment_end(self, trials: list[Any] | None = None, **info: Any) -> None:
        """Write what is queued, report what could not be written, close the log."""
        trials = _trials(trials)
        self._status_changes.settle()
        self._track_new(trials)
        if self._session is not None:  # the log ends with Ray's status of every trial
            self._status_changes.align_end(trials)
        seam.remove_listener(self)
        self._seam_listening = False
        self._attempts.step_ended(self._recorder, end=True)  # causes Ray told late
        if self._session is None:
            return
        self._session.finish(trials, self.hook_errors)
        self._finished = True

    @_never_raises
    def get_state(self) -> dict[str, Any] | None:
        """Tune's experiment checkpoint: the log's copy goes to storage with it.

        Nothing is added to Tune's callback state (``None``); see :meth:`__getstate__`.
        """
        self._upload_log(changed_only=True)
        return None
