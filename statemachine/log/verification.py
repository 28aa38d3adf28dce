"""Verify: fold a log through the ``transitions`` machine itself and compare with what it recorded.

The fold of :mod:`.replay` runs the table compiled from the machine; :func:`verify` triggers
the machine, the definition, so it checks every decision the live path recorded against it.
:class:`Verifier` takes one row at a time, from a store (:func:`verify`, through the
:class:`~statemachine.log.history.VerifiableHistory` it reads) or from an export file being
imported (:func:`~statemachine.log.export_file.read_export`, before anything is written).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from statemachine.domain.events import Event, TrialFailed
from statemachine.domain.machine import TransitionRecord, apply
from statemachine.domain.state import TrialState
from statemachine.exceptions import EventDecodeError, InvalidTransitionError, StateMachineError
from statemachine.log.history import VerifiableHistory
from statemachine.log.records import INGEST_KIND, StoredEvent


@dataclass(frozen=True, slots=True)
class Divergence:
    """Where the fold first disagreed with what the log recorded.

    ``field`` is one of ``status_before``, ``status_after``, ``decision``, ``counters``,
    ``error_type`` (recorded vs replayed), ``transition`` (the event is not valid where the
    fold is), ``event`` (the row does not decode), ``epoch`` (no such driver session, or
    older than an earlier row's), ``recorded_at`` (time going back, or a stored time that is
    unreadable: ``recorded`` says what is wrong) or ``snapshot`` (a snapshot differs from
    the fold, or is ahead of the trial's last event).
    """

    position: int
    trial_id: str
    seq: int
    field: str
    recorded: Any
    replayed: Any

    def describe(self) -> str:
        """One line for people."""
        if self.field == "recorded_at" and self.replayed is None:  # unreadable: says why
            where = f"position {self.position}, trial {self.trial_id!r}, seq {self.seq}"
            return f"{where}: {self.recorded}"
        return (
            f"position {self.position}, trial {self.trial_id!r}, seq {self.seq}: "
            f"{self.field} recorded {self.recorded!r}, replay gives {self.replayed!r}"
        )


@dataclass(frozen=True, slots=True)
class SeqGap:
    """Sequence numbers missing from a trial: after ``after_seq`` came ``next_seq``."""

    trial_id: str
    after_seq: int
    next_seq: int


@dataclass(frozen=True, slots=True)
class VerifyResult:
    """The outcome of :func:`verify`; ``ok`` when the fold reproduces the whole log."""

    experiment: str
    trials: int
    events: int
    snapshots_checked: int
    divergence: Divergence | None
    gaps: tuple[SeqGap, ...]

    @property
    def ok(self) -> bool:
        """No divergence and no gap."""
        return self.divergence is None and not self.gaps


def _recorded_vs(item: StoredEvent, record: TransitionRecord) -> tuple[str, Any, Any] | None:
    checks: list[tuple[str, Any, Any]] = [
        ("status_before", item.status_before, record.status_before.value),
        ("status_after", item.status_after, record.status_after.value),
        ("decision", item.decision, record.decision.value if record.decision else None),
    ]
    if item.status_before is None:  # appended without a record: nothing to compare
        checks = []
    counters = item.counters
    if counters is not None:
        checks.append(("counters", counters, record.counters._asdict()))
    for name, recorded, replayed in checks:
        if recorded != replayed:
            return name, recorded, replayed
    return None


#: How far back a driver's wall clock may step (NTP) before verify calls it out of order.
CLOCK_TOLERANCE = timedelta(seconds=5)


@dataclass(frozen=True, slots=True)
class SessionSpan:
    """What :class:`Verifier` needs of a driver session: its epoch, when it started, and how
    (``kind``: an ``ingest`` session's events carry the times of the history it rebuilt,
    earlier than the session itself)."""

    epoch: int
    started_at: datetime
    kind: str | None = None


class Verifier:
    """The checks of :func:`verify`, fed one stored row at a time (in position order).

    Shared by :func:`verify` (rows from the store) and ``import`` (rows from the export file,
    checked before anything is written). Memory holds one state per trial, never the rows.
    ``sessions`` (``None``: not known) enables the epoch and start-time checks.
    """

    def __init__(
        self,
        experiment: str,
        *,
        snapshots: dict[str, TrialState] | None = None,
        sessions: Iterable[SessionSpan] | None = None,
    ) -> None:
        self.experiment = experiment
        self.snapshots = snapshots or {}
        self.sessions = {s.epoch: s for s in sessions} if sessions is not None else None
        #: Every trial's state after its rows so far (a diverged trial stops being folded).
        self.states: dict[str, TrialState] = {}
        self.broken: set[str] = set()
        self.divergence: Divergence | None = None
        self.gaps: list[SeqGap] = []
        self.count = self.checked = 0
        self._last_seq: dict[str, int] = {}
        self._last_position: dict[str, int] = {}
        self._last_epoch = 0
        self._last_time: dict[int, datetime] = {}

    def feed(self, item: StoredEvent) -> None:
        """Check one row."""
        self.count += 1
        previous = self._last_seq.get(item.trial_id, 0)
        if item.seq != previous + 1:
            self.gaps.append(SeqGap(item.trial_id, previous, item.seq))
        self._last_seq[item.trial_id] = item.seq
        self._last_position[item.trial_id] = item.position
        if item.trial_id in self.broken:
            return
        state = self.states.setdefault(item.trial_id, TrialState(item.trial_id))
        placed = self._row_found(item)  # epoch and time; the fold's own findings come first
        found: tuple[str, Any, Any] | None
        try:
            event = item.event
            record = apply(state, event)
            found = _recorded_vs(item, record) or _error_type_vs(item, event, record)
        except EventDecodeError as exc:
            found = ("event", item.type_name, str(exc))
        except InvalidTransitionError as exc:
            found = ("transition", item.status_before, str(exc))
        found = found or placed
        snapshot = self.snapshots.get(item.trial_id)
        if found is None and snapshot is not None and snapshot.seq == state.seq:
            self.checked += 1
            if snapshot != state:
                found = ("snapshot", snapshot.to_dict(), state.to_dict())
        if found is not None:
            self._diverged(item.position, item.trial_id, item.seq, found)
        elif item.damage is not None and self.divergence is None:
            # A broken recorded column (not the event): named, the trial still folds on.
            self.divergence = Divergence(item.position, item.trial_id, item.seq,
                                         "recorded_at", item.damage, None)

    def _row_found(self, item: StoredEvent) -> tuple[str, Any, Any] | None:
        """The row's epoch and time against the sessions and the rows before it."""
        timed = item.damage is None  # an unreadable time is reported as the row's damage
        if self.sessions is not None:
            session = self.sessions.get(item.epoch)
            if session is None:
                return ("epoch", item.epoch, f"one of the sessions' epochs {sorted(self.sessions)}")
            if timed and session.kind != INGEST_KIND \
                    and item.recorded_at < session.started_at - CLOCK_TOLERANCE:
                return ("recorded_at", item.recorded_at.isoformat(),
                        f"not before its session (epoch {item.epoch}) started at "
                        f"{session.started_at.isoformat()}")  # fmt: skip
        if item.epoch < self._last_epoch:
            return ("epoch", item.epoch,
                    f">= {self._last_epoch} (an earlier row's epoch: a fenced driver's row)")
        self._last_epoch = item.epoch
        last_time = self._last_time.get(item.epoch)
        if not timed:
            return None
        if last_time is not None and item.recorded_at < last_time - CLOCK_TOLERANCE:
            return ("recorded_at", item.recorded_at.isoformat(),
                    f"not before the previous row of the same session ({last_time.isoformat()})")
        if last_time is None or item.recorded_at > last_time:
            self._last_time[item.epoch] = item.recorded_at
        return None

    def _diverged(
        self, position: int, trial_id: str, seq: int, found: tuple[str, Any, Any]
    ) -> None:
        self.broken.add(trial_id)
        if self.divergence is None:
            self.divergence = Divergence(position, trial_id, seq, *found)

    def result(self) -> VerifyResult:
        """The outcome; a snapshot ahead of its trial's last row diverges at that row."""
        for trial_id, snapshot in self.snapshots.items():
            last = self._last_seq.get(trial_id, 0)
            if snapshot.seq > last and trial_id not in self.broken:
                self._diverged(self._last_position.get(trial_id, 0), trial_id, last, (
                    "snapshot", f"snapshot at seq {snapshot.seq}",
                    f"the trial's last event is seq {last}",
                ))  # fmt: skip
        return VerifyResult(
            experiment=self.experiment,
            trials=len(self._last_seq),
            events=self.count,
            snapshots_checked=self.checked,
            divergence=self.divergence,
            gaps=tuple(self.gaps),
        )


def _error_type_vs(
    item: StoredEvent, event: Event, record: TransitionRecord
) -> tuple[str, Any, Any] | None:
    """The ``error_type`` column against the error the event and its transition carry."""
    error = record.error if item.status_before is not None else None
    if error is None and isinstance(event, TrialFailed):
        error = event.error
    expected = error.kind if error is not None else None
    if item.error_type != expected:
        return ("error_type", item.error_type, expected)
    return None


def session_spans(store: VerifiableHistory, experiment: str) -> list[SessionSpan] | None:
    """The experiment's sessions as :class:`Verifier` needs them (``None``: unreadable)."""
    try:
        return [SessionSpan(s.epoch, s.started_at, s.kind)
                for s in store.list_sessions(experiment)]
    except (StateMachineError, ValueError):
        return None


def verify(store: VerifiableHistory, experiment: str) -> VerifyResult:
    """Fold the experiment's log with the live code path and compare with what it recorded.

    Checks, in global position order: every row decodes, every event is a valid transition,
    every recorded status/decision/counters and ``error_type`` equals the fold's, every
    row's epoch is a recorded driver session's and never older than an earlier row's, times
    do not go back within a session (beyond :data:`CLOCK_TOLERANCE`) nor before it started
    (except in an ``ingest`` session, whose events carry the times of Ray's history),
    the trial's sequence numbers have no gap, and every usable snapshot equals the fold at
    its seq (a snapshot ahead of its trial's last event diverges). Reports the first
    divergence (by position) and every gap; trials after their divergence are not folded on.
    """
    verifier = Verifier(
        experiment,
        snapshots=store.load_snapshots(experiment),
        sessions=session_spans(store, experiment),
    )
    for item in store.read_experiment(experiment):
        verifier.feed(item)
    return verifier.result()
