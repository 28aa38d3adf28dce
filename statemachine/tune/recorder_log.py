"""The recorder's side of the event log: what it writes to, what it holds, what it saves.

The recorder (:mod:`statemachine.tune.recorder`) writes to a :class:`WritableLog` (an
:class:`~statemachine.log.ExperimentLog`). A :class:`PendingEvent` is an event it folded but
has not written yet, carrying that fold (so the log need not fold it again); one that can
never be written (the store stayed down, the log refused it, the fold refused it) is saved at
the end of the run to a JSON-lines file (:func:`save_events`), one event per line with why it
was not written: nothing is dropped silently.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from statemachine.domain.events import Event, encode_event
from statemachine.domain.machine import TransitionRecord
from statemachine.domain.state import TrialState
from statemachine.log.experiment_log import Prefolded

__all__ = ["PendingEvent", "WritableLog", "save_events"]


class WritableLog(Protocol):
    """What the recorder writes to: an :class:`~statemachine.log.ExperimentLog`."""

    @property
    def renamed_from(self) -> tuple[str, str | None] | None:
        """The experiment's old name and storage path when it continues under a new name."""

    def states(self) -> Mapping[str, TrialState]:
        """Every trial's current state in the log."""

    def events(self, trial_id: str) -> list[Event]:
        """The trial's recorded events, oldest first."""

    def append_folded(self, items: Sequence[Prefolded]) -> object:
        """Append events the caller folded, in one transaction (all or none)."""

    def close(self, clean: bool = True) -> None:
        """End the session (a clean close snapshots every trial first)."""


@dataclass(frozen=True)
class PendingEvent:
    """An event folded into the shadow state but not yet written to the log.

    ``seq``, ``record``, ``before`` and ``after`` are that fold (see
    :class:`~statemachine.log.experiment_log.Prefolded`), so the log need not fold it again.
    """

    trial_id: str
    event: Event
    event_id: str
    seq: int = -1
    record: TransitionRecord | None = None
    before: TrialState | None = None
    after: TrialState | None = None

    def prefolded(self) -> Prefolded:
        """What :meth:`~statemachine.log.ExperimentLog.append_folded` takes."""
        return Prefolded(self.trial_id, self.event, self.event_id, self.seq, self.record,
                         self.before, self.after)

    def to_json(self) -> dict[str, Any]:
        """The JSON form saved when it could not be written at all."""
        type_name, version, payload = encode_event(self.event)
        return {
            "trial_id": self.trial_id,
            "event_id": self.event_id,
            "type": type_name,
            "version": version,
            "payload": payload,
        }


def save_events(path: Path, items: Sequence[tuple[PendingEvent, str]]) -> Path | None:
    """Append ``items`` (each event with why it was not written) to ``path`` as JSON lines;
    ``None`` (and no file) when there are none."""
    if not items:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as out:
        for pending, reason in items:
            out.write(json.dumps({**pending.to_json(), "reason": reason}) + "\n")
    return path
