"""Record trial events without ever blocking a decision on the store, and never lose one.

Every event is folded at once into a shadow state (the one live fold the log uses,
:func:`~statemachine.domain.compiled.fold_for_session`), so the decision Ray must follow is
known even while the store is down. The events then go to the
:class:`~statemachine.log.ExperimentLog` in per-trial order, with that fold
(:meth:`~statemachine.log.ExperimentLog.append_folded`: the log does not fold them again):
a failing write is retried a few times, then left queued and retried later (after a short
cool-down, at every step end and at the end of the experiment). Whatever is still unwritten
at the end is reported with ``logger.error`` and saved to a JSON-lines file; nothing is
dropped silently. An event the fold refuses (not valid in the trial's state) is reported and
counted as rejected.

With ``background=True`` (what :class:`~statemachine.tune.EventLogCallback` uses) an event
that carries no decision (a start, a checkpoint, a completion: the fold's record has no
``decision``) is handed to a writer thread, which group-writes the queue while Ray goes on;
an event that carries a decision (a failure and what to do about it) first waits for
everything queued before it and is then written at once: it is durable before the call
returns, i.e. before Ray acts on it. The order of the log is the order of the calls either
way. Whatever is queued when a write starts goes to the log as one transaction (one commit,
so one fsync for the lot); a batch the log refuses is written again one event at a time, so
a store that is down is retried and an event that can never be stored goes alone to the
dead letters.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from statemachine.domain.compiled import fold_for_session
from statemachine.domain.events import Event, with_policy
from statemachine.domain.machine import TransitionRecord
from statemachine.domain.policy import RetryPolicy
from statemachine.domain.state import TrialState
from statemachine.exceptions import (
    ConfigurationError,
    FencedError,
    InvalidTransitionError,
    LogCopyRefusedError,
    LogFileLostError,
    UnstorableValueError,
)
from statemachine.log.records import new_event_id
from statemachine.tune.recorder_log import PendingEvent, WritableLog, save_events

logger = logging.getLogger(__name__)


class Recorder:
    """Folds events into shadow states and writes them to an event log, resiliently.

    Args:
        open_log: opens the :class:`~statemachine.log.ExperimentLog` (called again after a
            failure, so a store that comes back is used again).
        policy: the retry policy in force for every trial of the experiment.
        attempts: write attempts per event before it is left queued.
        backoff_s: sleep before the second attempt (doubled each time).
        cooldown_s: after a failed write, how long later events only queue.
        background: write events that carry no decision from a writer thread (see the
            module); decision-bearing events are always written before ``record`` returns.
        batch_size: at most this many queued events go to the log in one transaction (one
            commit); a batch that fails is written again one event at a time.
    """

    def __init__(
        self,
        open_log: Callable[[], WritableLog],
        policy: RetryPolicy,
        *,
        attempts: int = 3,
        backoff_s: float = 0.05,
        cooldown_s: float = 2.0,
        background: bool = False,
        batch_size: int = 500,
    ) -> None:
        self._open_log = open_log
        self.policy = policy
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.cooldown_s = cooldown_s
        self.log: WritableLog | None = None
        """The log, once open (``None`` before, after a failed open and after the end)."""
        self.states: dict[str, TrialState] = {}
        self._queue: deque[PendingEvent] = deque()
        self._blocked_until = 0.0
        self.fenced = False
        self.recorded = 0
        """Events written to the log."""
        self.write_failures = 0
        """Failed write (or open) attempts."""
        self.rejected = 0
        """Events the fold refused (not valid in the trial's folded state)."""
        self.dead: list[tuple[PendingEvent, str]] = []
        """Events the log refused for good, with the reason."""
        self.rejected_events: list[tuple[PendingEvent, str]] = []
        """Events the fold refused, with the reason: never in the log, saved with the
        unwritten ones."""
        self.refused: str | None = None
        """Why the log can never be opened with this configuration (then it is not retried)."""
        self._failing = False  # a write failed and nothing was written since
        self.background = background
        # One writer at a time (the driver's flush or the writer thread): the log, the
        # queue's head, the counters. Appending to the queue needs no lock (a deque).
        self._io = threading.RLock()
        self._wake = threading.Event()
        self._stopping = False
        self._writer: threading.Thread | None = None
        self.batch_size = batch_size

    # ------------------------------------------------------------------ reading

    @property
    def unwritten(self) -> int:
        """Events folded but not (yet) in the log."""
        return len(self._queue) + len(self.dead)

    def state(self, trial_id: str) -> TrialState | None:
        """The trial's folded state, including events not written yet."""
        return self.states.get(trial_id)

    def events(self, trial_id: str) -> list[Event]:
        """The trial's events in the log (``[]`` while the log is not open), then those not
        written yet."""
        written = self.log.events(trial_id) if self.log is not None else []
        return written + [p.event for p in list(self._queue) if p.trial_id == trial_id]

    # ------------------------------------------------------------------ opening

    def open(self) -> bool:
        """Open the log (once it works) and load the states it holds; True when open."""
        if self.log is not None:
            return True
        if self.fenced or self.refused is not None:
            return False
        try:
            log = self._open_log()
        except (ConfigurationError, LogCopyRefusedError) as exc:
            # A bad setting (an unsupported database URL, ...) or a copy of the log that must
            # not be used (another log's, torn): no retry can ever open the log. The events
            # stay queued and are saved at the end with the others.
            self.write_failures += 1
            self.refused = str(exc)
            logger.error(
                "statemachine: the event log cannot be used with this configuration, events "
                "are kept in memory and saved at the end: %s", exc,
            )  # fmt: skip
            return False
        except Exception as exc:  # the store is reported, never raised
            self.write_failures += 1
            self._failing = True
            self._blocked_until = time.monotonic() + self.cooldown_s
            logger.warning("statemachine: cannot open the event log: %s", exc)
            return False
        self.log = log
        for trial_id, stored in log.states().items():
            if trial_id not in self.states:
                self.states[trial_id] = stored.copy()
        return True

    def close(self, clean: bool = True) -> None:
        """Close the log (snapshots and ends the driver session); errors are reported.

        The writer thread is stopped first; call :meth:`flush` before to write what it had
        queued.
        """
        self._stop_writer()
        with self._io:
            log, self.log = self.log, None
        if log is None:
            return
        try:
            log.close(clean=clean)
        except Exception as exc:
            logger.error("statemachine: closing the event log failed: %s", exc)

    # ------------------------------------------------------------------ recording

    def record(self, trial_id: str, event: Event) -> TransitionRecord | None:
        """Fold ``event`` into the trial's shadow state, queue it for the log, try to write.

        Returns what the event did (the decision Ray must follow), or ``None`` when the fold
        refused it (reported and counted in :attr:`rejected`).
        """
        shadow = self.states.get(trial_id)
        new = shadow.copy() if shadow is not None else TrialState(trial_id)
        try:
            recorded = fold_for_session(new, event, self.policy)
        except InvalidTransitionError as exc:
            self.rejected += 1
            # saved as the log would have written it (a PolicySet first, if one was due)
            events = with_policy(event, (shadow or new).policy, self.policy)
            self.rejected_events.extend((PendingEvent(trial_id, e, new_event_id()),
                                         f"refused by the state machine: {exc}")
                                        for e in events)
            logger.error("statemachine: event not recorded, the fold refuses it: %s", exc)
            return None
        self.states[trial_id] = new
        # The log appends each event as folded here when it holds the very state it came from.
        before = shadow
        for each, seq, record, after in recorded:
            after = after or new
            self._queue.append(PendingEvent(trial_id, each, new_event_id(), seq, record, before,
                                            after))
            before = after
        if self.background and all(r.decision is None for _, _, r, _ in recorded):
            self._start_writer()
            self._wake.set()
        else:
            with self._io:  # a decision: durable, after everything before it, before Ray acts
                self._flush(False)
        return recorded[-1][2]

    def _start_writer(self) -> None:
        if self._writer is None and not self._stopping:
            self._writer = threading.Thread(
                target=self._write_in_background, name="statemachine-recorder", daemon=True
            )
            self._writer.start()

    def _write_in_background(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stopping:
                return
            # A log that is not open is (re)opened by the driver's own flush (step end).
            if self.log is not None:
                try:
                    with self._io:
                        self._flush(False)
                except Exception as exc:  # never let the thread die with events queued
                    logger.error("statemachine: the background writer failed: %s", exc)

    def _stop_writer(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            self._stopping = True
            self._wake.set()
            writer.join()
            self._stopping = False

    def flush(self, force: bool = False) -> int:
        """Write queued events in order; returns how many are still queued.

        Within the cool-down after a failure nothing is tried unless ``force``. With the
        writer thread running and the log open, this only wakes it (Tune's step end must not
        wait for a disk); ``force`` waits for its current write, then writes the rest.
        """
        if not force and self._writer is not None and self.log is not None:
            self._wake.set()
            return len(self._queue)
        with self._io:
            return self._flush(force)

    def _flush(self, force: bool) -> int:
        if not self._queue or self.fenced:
            return len(self._queue)
        if not force and time.monotonic() < self._blocked_until:
            return len(self._queue)
        if not self.open():
            return len(self._queue)
        written = 0
        while self._queue:
            # Index, never iterate: the driver appends to the queue while this runs.
            batch = [self._queue[i] for i in range(min(len(self._queue), self.batch_size))]
            if len(batch) > 1 and self._write_batch(batch):
                for _ in batch:
                    self._queue.popleft()
                written += len(batch)
                continue
            if self.log is None:  # its file was lost: every event stays queued
                return len(self._queue)
            # One by one: the store is down (retried, then queued) or an event of the batch
            # can never be written (it alone goes to the dead letters).
            for _ in batch:
                if not self._write(self._queue[0]):
                    self._failing = True
                    return len(self._queue)
                self._queue.popleft()
                written += 1
        if self._failing:
            self._failing = False
            logger.warning(
                "statemachine: the event log is writable again: %d queued event(s) written "
                "late (%d failed write attempt(s) so far)", written,
                self.write_failures,
            )
        return 0

    def _write_batch(self, batch: list[PendingEvent]) -> bool:
        """Write ``batch`` in one transaction (one commit, one fsync); False if it failed.

        All or none: after a failure nothing of it is in the log (or, when the commit's
        outcome is unknown, all of it is, and the same event ids make the one-by-one retry
        a no-op), so the caller writes it again one event at a time.
        """
        log = self.log
        if log is None:
            return False
        try:
            log.append_folded([p.prefolded() for p in batch])
        except LogFileLostError as exc:
            self._file_lost(exc)
            return False
        except Exception as exc:
            logger.debug("statemachine: a group write of %d events failed (%s); writing "
                         "them one by one", len(batch), exc)
            return False
        self.recorded += len(batch)
        return True

    def _write(self, pending: PendingEvent) -> bool:
        delay = self.backoff_s
        for attempt in range(1, self.attempts + 1):
            log = self.log
            if log is None:  # closed meanwhile: stays queued
                return False
            try:
                log.append_folded([pending.prefolded()])
            except LogFileLostError as exc:
                self._file_lost(exc)
                return False
            except (InvalidTransitionError, UnstorableValueError, ConfigurationError) as exc:
                # The log's fold disagrees with ours, the database can never hold a value of
                # this event, or the call itself is wrong: it can never be written. It goes
                # to the dead letters at once, so the events behind it are not held up.
                self.dead.append((pending, str(exc)))
                logger.error("statemachine: the event log refuses an event: %s", exc)
                return True
            except Exception as exc:  # retried, then queued and reported
                self.write_failures += 1
                if isinstance(exc, FencedError):
                    self.fenced = True
                    logger.error(
                        "statemachine: a newer driver took over this experiment's event log; "
                        "this driver stops writing (%s)", exc,
                    )
                    return False
                if attempt < self.attempts:
                    time.sleep(delay)
                    delay *= 2
                    continue
                self._blocked_until = time.monotonic() + self.cooldown_s
                logger.warning(
                    "statemachine: writing a %s event of trial %s failed %d times (%s); "
                    "%d event(s) queued, retried later",
                    pending.event.type_name, pending.trial_id, self.attempts, exc,
                    len(self._queue),
                )
                return False
            self.recorded += 1
            return True
        return False  # pragma: no cover - the loop always returns

    def _file_lost(self, exc: LogFileLostError) -> None:
        """The log's file was deleted, renamed or replaced while open: say so once, write no
        more (the writes would go to the lost file), keep every event from this one on.

        They stay queued, and are saved with the unwritten events at the end (the
        dead-letter file), exactly as recorded; the shadow states go on deciding. No new log
        is started at the path: one that was moved away still holds the history, and a file
        someone put in its place is not this log.
        """
        self.refused = str(exc)
        log, self.log = self.log, None
        logger.error(
            "statemachine: %s. Nothing more is written to it: the %d event(s) this driver "
            "recorded into it are only in that file (gone if it was deleted), and this and "
            "every later event are kept and saved at the end of the run to the unwritten "
            "events file (statemachine-unwritten-<pid>.jsonl)", str(exc).rstrip("."),
            self.recorded,
        )
        if log is None:
            return
        try:
            log.close(clean=False)  # releases the connections; its own writes fail alike
        except Exception as close_exc:  # the lost file: nothing to report twice
            logger.debug("statemachine: closing the lost log: %s", close_exc)

    # ------------------------------------------------------------------ the end

    def save_unwritten(self, path: Path) -> Path | None:
        """Save every unwritten event to ``path`` (JSON lines); ``None`` if there are none."""
        self._stop_writer()
        items = [(p, "not written") for p in self._queue] + self.dead + self.rejected_events
        return save_events(path, items)

    def summary(self) -> dict[str, int]:
        """Counts for the final report."""
        return {
            "recorded": self.recorded,
            "unwritten": self.unwritten,
            "write_failures": self.write_failures,
            "rejected": self.rejected,
        }
