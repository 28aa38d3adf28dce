"""Read the histories ``advise`` works on from an event log: each trial's events, decoded,
with the times they were recorded. A row that does not decode ends its trial's history
there (a fold cannot go on over a gap) and is reported, once, as a warning."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from statemachine.advise.history import TrialHistory, history
from statemachine.domain.events import Event
from statemachine.exceptions import EventDecodeError
from statemachine.log import EventStore
from statemachine.log.records import StoredEvent


@dataclass
class Read:
    """The histories read, and what could not be read."""

    histories: list[TrialHistory] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def histories_of(experiment: str, rows: Iterable[StoredEvent], read: Read) -> None:
    """Add the histories of ``rows`` (one experiment's, in log order) to ``read``."""
    events: dict[str, list[Event]] = {}
    times: dict[str, list[float]] = {}
    broken: set[str] = set()
    for row in rows:
        trial = row.trial_id
        if trial in broken:
            continue
        try:
            event = row.event
        except EventDecodeError as exc:
            broken.add(trial)
            read.warnings.append(f"{exc}; trial {trial!r} is advised on as of seq "
                                 f"{row.seq - 1}")
            continue
        trial_times = times.setdefault(trial, [])
        known = row.recorded_at_known
        moment = known.timestamp() if known is not None else (
            trial_times[-1] if trial_times else 0.0)
        events.setdefault(trial, []).append(event)
        trial_times.append(moment)
    for trial, trial_events in events.items():
        read.histories.append(history(experiment, trial, trial_events, times[trial]))


def read_histories(store: EventStore, experiments: Sequence[str]) -> Read:
    """Every trial's history of ``experiments`` (names the caller checked)."""
    read = Read()
    for name in experiments:
        histories_of(name, store.read_experiment(name), read)
    return read
