"""One driver session's event log: opened at the first trial, copied to storage, closed at the end.

The log is found (:mod:`statemachine.tune.store_url`: the URL given, ``STATEMACHINE_DB_URL``,
or ``statemachine.db`` in the experiment's folder), announced once per process, and written
through a background :class:`~statemachine.tune.recorder.Recorder`. When the experiment is
stored remotely, a copy of the log follows it (:class:`~statemachine.tune.log_sync.LogSync`):
the newest copy is brought back before the log is opened, and uploads are requested at
decisions and with Tune's experiment checkpoint. At the end, what could not be written is
saved to a file and reported, never dropped silently.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from statemachine.domain.policy import RetryPolicy
from statemachine.log import ExperimentLog
from statemachine.log.credentials import describe_url, redact_uri
from statemachine.log.records import storable_name
from statemachine.tune.ray_surface import trials as ray_trial
from statemachine.tune.recorder import Recorder
from statemachine.tune.store_url import (
    default_db_path,
    log_sync_for,
    resolve_url,
    warn_if_network_filesystem,
)

if TYPE_CHECKING:
    from statemachine.tune.log_sync import LogSync

logger = logging.getLogger(__name__)

__all__ = ["SYNC_CLOSE_TIMEOUT_S", "LogSession"]

#: How long the end of an experiment waits for the last upload of the log's copy.
SYNC_CLOSE_TIMEOUT_S = 60.0
#: The logs announced in this process (each is printed once).
_printed_urls: set[str] = set()


class LogSession:
    """The event log of one driver session, with its copy on the experiment's storage.

    Args:
        url: the log's URL as the callback was given it (``None``: the default).
        policy: the callback's policy (``None``: Ray's own, with the run's ``max_failures``).
        busy_timeout_ms: passed to the log when given.
        trial: the first trial the driver saw (where the experiment is stored).
        continue_ids: the trials ``Tuner.restore`` brought back that ran: a log that
            recorded the experiment has every one (a moved or renamed experiment continues).
        session_kind: ``"restore"`` or ``"fresh"`` (see ``ExperimentLog.open``).

    The recorder is built, not opened: :meth:`Recorder.open` opens the log.
    """

    def __init__(self, url: str | None, policy: RetryPolicy | None,
                 busy_timeout_ms: int | None, trial: Any, continue_ids: list[str],
                 session_kind: str | None) -> None:
        self.policy = policy or RetryPolicy.from_env(
            max_failures=ray_trial.max_failures(trial))
        """The policy decisions are made with."""
        resolved = resolve_url(url, trial)
        self.store_url = describe_url(resolved)
        """The log's URL for messages: never the password."""
        # A folder name that is not valid UTF-8 cannot be stored or printed as it is.
        experiment = storable_name(ray_trial.experiment_name(trial))
        sync = log_sync_for(url, trial)
        self.log_sync: LogSync | None = sync
        """The copy of the log on the experiment's storage (``None``: stored locally)."""
        if resolved not in _printed_urls:
            _printed_urls.add(resolved)
            follows = f" (a copy follows the experiment to {sync.remote.label})" if sync else ""
            print(f"statemachine: recording trial events of {experiment} to "
                  f"{self.store_url}{follows}", flush=True)
        warn_if_network_filesystem(resolved)
        storage_path = redact_uri(ray_trial.experiment_path(trial))
        options: dict[str, Any] = {}
        if busy_timeout_ms is not None:
            options["busy_timeout_ms"] = int(busy_timeout_ms)
        policy_in_force = self.policy

        def open_log() -> ExperimentLog:
            if sync is not None:
                sync.prepare()  # the newest log from storage, before the counters are read
            return ExperimentLog.open(resolved, experiment, policy_in_force,
                                      storage_path=storage_path, session_kind=session_kind,
                                      continue_trials=continue_ids, **options)

        self.recorder = Recorder(open_log, policy_in_force, background=True)
        """Folds and writes the events (opened by the caller)."""

    # ------------------------------------------------------------------ the copy on storage

    def upload(self, *, changed_only: bool = False) -> None:
        """Ask for an upload of the log to the experiment's storage (returns at once);
        ``changed_only``: not when this driver wrote nothing since the last request."""
        if self.log_sync is not None:
            self.recorder.flush()
            self.log_sync.request(self.recorder.recorded if changed_only else None)

    def close_sync(self) -> None:
        """Upload what is left and stop the copy's uploader (waits a bounded time)."""
        sync, self.log_sync = self.log_sync, None
        if sync is not None:
            sync.request()
            sync.close(timeout=SYNC_CLOSE_TIMEOUT_S)

    # ------------------------------------------------------------------ counts and the end

    def summary(self, hook_errors: int) -> dict[str, int]:
        """The recorder's counts, the hooks that failed and the uploads of the copy."""
        sync = self.log_sync.stats if self.log_sync else None
        uploads = {"uploads": sync.uploads, "upload_failures": sync.failures} if sync else {}
        return {**self.recorder.summary(), "hook_errors": hook_errors, **uploads}

    def finish(self, trials: list[Any], hook_errors: int) -> None:
        """Write what is queued, report what could not be written, close the log."""
        recorder = self.recorder
        recorder.flush(force=True)
        for trial in trials:
            trial_id, ray_status = ray_trial.trial_id(trial), ray_trial.status(trial)
            state = recorder.state(trial_id)
            if state is not None and state.status.value != ray_status:
                logger.warning("statemachine: trial %s ends %s in Ray but %s in the log",
                               trial_id, ray_status, state.status)
        summary = self.summary(hook_errors)
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
        elif hook_errors:
            logger.warning(
                "statemachine: %d callback hook(s) failed (logged above): the log at %s may "
                "miss events (%s)", hook_errors, self.store_url, summary)
        else:
            logger.info("statemachine: event log summary: %s", summary)
        recorder.close(clean=not recorder.unwritten)
        self.close_sync()

    @staticmethod
    def _unwritten_path(trials: list[Any]) -> Path:
        folder = Path.cwd()
        if trials:
            folder = default_db_path(trials[0]).parent
        return folder / f"statemachine-unwritten-{os.getpid()}.jsonl"
