"""Reading helpers shared by the commands: name checks with suggestions, decoding with
corrupted-row warnings, driver-session ends, and ``--at`` parsing."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from statemachine.cli.db import BadInput
from statemachine.domain.compiled import apply_compiled
from statemachine.domain.events import Event
from statemachine.domain.state import TrialState
from statemachine.exceptions import UnknownExperimentError, UnknownTrialError, close_matches
from statemachine.log.replay import fold_stored

if TYPE_CHECKING:
    from statemachine.cli.output import Output
    from statemachine.log import EventStore
    from statemachine.log.records import SessionInfo, StoredEvent


def require_experiment(store: EventStore, name: str) -> None:
    """Raise :class:`UnknownExperimentError` (with the nearest names) unless ``name`` exists."""
    names = [info.name for info in store.list_experiments()]
    if name not in names:
        raise UnknownExperimentError(name, close_matches(name, names))


def require_trial(store: EventStore, experiment: str, trial_id: str) -> None:
    """Raise :class:`UnknownTrialError` (with the nearest ids) unless the trial has events."""
    require_experiment(store, experiment)
    trials = store.list_trials(experiment)
    if trial_id not in trials:
        raise UnknownTrialError(experiment, trial_id, close_matches(trial_id, trials))


@dataclass(frozen=True)
class At:
    """A point in the log: an event position, or a time (UTC)."""

    position: int | None = None
    time: datetime | None = None

    def includes(self, stored: StoredEvent) -> bool:
        """Whether ``stored`` had been recorded at this point."""
        if self.position is not None:
            return stored.position <= self.position
        assert self.time is not None
        return stored.recorded_at <= self.time

    def to_json(self) -> dict[str, object]:
        """``{"position": n}`` or ``{"time": iso}``."""
        if self.position is not None:
            return {"position": self.position}
        assert self.time is not None
        return {"time": self.time.isoformat()}


def parse_at(value: str | None) -> At | None:
    """Parse ``--at``: an integer event position, or an ISO 8601 time (naive means UTC)."""
    if value is None:
        return None
    text = value.strip()
    if text.lstrip("-").isdigit():
        position = int(text)
        if position < 0:
            raise BadInput(f"--at position must be >= 0, got {position}")
        return At(position=position)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise BadInput(
            f"--at takes an event position (an integer) or an ISO time such as "
            f"2026-01-31T12:00:00Z, got {value!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return At(time=moment.astimezone(timezone.utc))


def decode_trial(
    stored: Iterable[StoredEvent], out: Output
) -> list[tuple[StoredEvent, Event]]:
    """A trial's rows with their decoded events, in order, as far as they fold.

    At a row that does not decode (corrupted) or does not fold (not a valid transition where
    the trial is), warn naming its position and stop there: the rows after it cannot be
    folded on a gap.
    """
    rows = list(stored)
    if not rows:
        return []
    replay = fold_stored(rows[0].trial_id, rows)
    if replay.halted_at is not None:
        out.warn(halt_message(replay.halted_at, replay.halt_reason or ""))
    return [(step.stored, step.stored.event) for step in replay.steps]


def group_by_trial(rows: Iterable[StoredEvent]) -> dict[str, list[StoredEvent]]:
    """Rows per trial, in log order, trials in order of first appearance."""
    grouped: dict[str, list[StoredEvent]] = defaultdict(list)
    for row in rows:
        grouped[row.trial_id].append(row)
    return dict(grouped)


def session_ends(sessions: Iterable[SessionInfo]) -> dict[int, str]:
    """How each driver epoch ended: ``clean``, ``crashed`` (never ended and a newer epoch
    took over, or ended unclean) or ``open`` (the newest session, not ended yet)."""
    ordered = sorted(sessions, key=lambda s: s.epoch)
    ends: dict[int, str] = {}
    for i, s in enumerate(ordered):
        if s.clean_end:
            ends[s.epoch] = "clean"
        elif s.ended_at is not None or i < len(ordered) - 1:
            ends[s.epoch] = "crashed"
        else:
            ends[s.epoch] = "open"
    return ends


def fold_states(
    store: EventStore, experiment: str, out: Output, at: At | None = None
) -> list[TrialState]:
    """Every trial's state (as of ``at``), folded from its events through the compiled
    machine. A row that does not decode or fold is reported (naming its position) and its
    trial is shown as of the row before; the other trials are unaffected."""
    rows = store.read_experiment(experiment)
    if at is not None:
        rows = (r for r in rows if at.includes(r))
    states = []
    for trial_id, trial_rows in group_by_trial(rows).items():
        replay = fold_stored(trial_id, trial_rows, keep_steps=False, step=apply_compiled)
        if replay.halted_at is not None:
            out.warn(halt_message(replay.halted_at, replay.halt_reason or ""))
        states.append(replay.state)
    return states


def halt_message(row: StoredEvent, reason: str) -> str:
    """One line for a row a fold stopped at."""
    where = f"position {row.position}"
    if where not in reason:
        reason = (f"event at position {row.position} (trial {row.trial_id!r}, seq {row.seq}) "
                  f"does not fold: {reason}")
    return f"{reason}; trial {row.trial_id!r} is shown as of seq {row.seq - 1}"
