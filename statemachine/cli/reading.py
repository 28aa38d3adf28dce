"""Reading helpers shared by the commands: name checks with suggestions, decoding with
corrupted-row warnings, driver-session ends, and ``--at`` parsing."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING

import click

from statemachine.cli.db import BadInput
from statemachine.domain.compiled import apply_compiled
from statemachine.domain.events import Event
from statemachine.domain.state import TrialState
from statemachine.exceptions import (
    EventDecodeError,
    InvalidTransitionError,
    UnknownExperimentError,
    UnknownTrialError,
    close_matches,
)
from statemachine.log.bulk import collector_paused
from statemachine.log.read import ReadModel
from statemachine.log.replay import fold_stored

if TYPE_CHECKING:
    from statemachine.cli.output import Output
    from statemachine.log import EventStore
    from statemachine.log.records import SessionInfo, StoredEvent


def require_experiment(store: EventStore, name: str | None) -> str:
    """The experiment ``name`` names, or the log's only experiment when ``name`` is ``None``.

    Raises :class:`UnknownExperimentError` (with the nearest names, else the names the log
    holds) for an unknown name, :class:`BadInput` listing the experiments when none is given
    and the log holds several (or none).
    """
    names = store.experiment_names()
    if name is None:
        if len(names) == 1:
            return names[0]
        if not names:
            raise BadInput("this event log holds no experiment yet")
        raise BadInput(
            f"this event log holds {len(names)} experiments; name one of them: {_listed(names)}"
        )
    if name not in names:
        raise UnknownExperimentError(name, close_matches(name, names), names)
    return name


def require_trial(store: EventStore, experiment: str | None, trial_id: str) -> tuple[str, str]:
    """The experiment (as :func:`require_experiment`) and the trial id that ``trial_id``
    names: the id itself, Ray's trial name (``Flaky_947ed_00002``, the trainable's name
    before the id) or a unique prefix of an id. Raises :class:`UnknownTrialError` (with the
    nearest ids) or :class:`BadInput` for a prefix several ids share."""
    given = experiment
    experiment = require_experiment(store, experiment)
    if store.has_trial(experiment, trial_id):  # the id itself: no need to list every trial
        return experiment, trial_id
    try:
        return experiment, resolve_trial_id(experiment, trial_id, store.list_trials(experiment))
    except UnknownTrialError:
        if given is None and trial_id == experiment:  # `show EXP`: the trial was left out
            raise click.UsageError("Missing argument 'TRIAL'.",
                                   click.get_current_context(True)) from None
        raise


def resolve_trial_id(experiment: str, text: str, trials: list[str]) -> str:
    """The one trial id of ``trials`` that ``text`` names (see :func:`require_trial`)."""
    if text in trials:
        return text
    named = [t for t in trials if text.endswith(f"_{t}")]
    if len(named) == 1:
        return named[0]
    prefixed = [t for t in trials if text and t.startswith(text)]
    if len(prefixed) == 1:
        return prefixed[0]
    if len(prefixed) > 1:
        raise BadInput(
            f"trial {text!r} of experiment {experiment!r} is ambiguous: {len(prefixed)} trial "
            f"ids start with it ({_listed(sorted(prefixed))}); give more of the id"
        )
    raise UnknownTrialError(experiment, text, close_matches(text, trials))


def experiment_and_trial(first: str | None, second: str | None) -> tuple[str | None, str]:
    """``[EXPERIMENT] TRIAL`` arguments: one value is the trial (of the only experiment)."""
    if second is not None:
        return first, second
    if first is None:
        raise click.UsageError("Missing argument 'TRIAL'.", click.get_current_context(True))
    return None, first


def _listed(names: list[str], most: int = 8) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


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
    """Parse ``--at``: an integer event position, or an ISO 8601 time (naive means UTC).

    Raises :class:`BadInput` (one line) for anything else, a negative or too large position,
    or a time that is not a moment in UTC (``9999-12-31T23:59:59-14:00`` is past year 9999).
    """
    if value is None:
        return None
    text = value.strip()
    if re.fullmatch(r"[+-]?[0-9]+", text):
        position = int(text)
        if not 0 <= position <= 2**63 - 1:
            raise BadInput(f"--at position must be between 0 and 2**63-1, got {text[:30]}")
        return At(position=position)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        return At(time=moment.astimezone(timezone.utc))
    except (ValueError, OverflowError):
        raise BadInput(
            f"--at takes an event position (an integer) or an ISO time in years 1 to 9999 "
            f"UTC such as 2026-01-31T12:00:00Z, got {value[:60]!r}"
        ) from None


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


def session_kinds(sessions: Iterable[SessionInfo]) -> dict[int, str | None]:
    """How each driver epoch began: ``fresh`` (``Tuner.fit()``), ``restore``
    (``Tuner.restore``), ``ingest`` (``trial-replay ingest``) or ``None`` (not recorded)."""
    return {s.epoch: s.kind for s in sessions}


def describe_sessions(sessions: Iterable[SessionInfo]) -> str:
    """``epoch 1 Tuner.fit() (crashed), epoch 2 Tuner.restore (clean)``: one line."""
    listed = list(sessions)
    ends = session_ends(listed)
    words = {"fresh": "Tuner.fit()", "restore": "Tuner.restore",
             "ingest": "trial-replay ingest of Ray's files"}
    return ", ".join(
        f"epoch {s.epoch}" + (f" {words[s.kind]}" if s.kind in words else "")
        + f" ({ends[s.epoch]})"
        for s in sorted(listed, key=lambda s: s.epoch)
    )


def fold_states(
    store: EventStore, experiment: str, out: Output, at: At | None = None
) -> list[TrialState]:
    """Every trial's state (as of ``at``), folded from its events through the compiled
    machine, in order of first event. A row that does not decode or fold is reported (naming
    its position) and its trial is shown as of the row before; the other trials are
    unaffected.

    Streaming: rows are read in pages and folded as they come, so memory holds one state per
    trial, never the history (``--at`` of a 100,000-trial experiment).
    """
    rows = store.read_experiment(experiment)
    states: dict[str, TrialState] = {}
    halted: set[str] = set()
    with collector_paused():
        for row in rows:
            if at is not None and not at.includes(row):
                if at.position is not None:
                    break  # rows come in position order: the rest is after the point
                continue
            trial_id = row.trial_id
            if trial_id in halted:
                continue
            state = states.get(trial_id)
            if state is None:
                state = states[trial_id] = TrialState(trial_id)
            try:
                event = row.event
                _ = row.counters  # a row is whole only if its counters parse too
                apply_compiled(state, event)
            except (EventDecodeError, InvalidTransitionError) as exc:
                halted.add(trial_id)
                out.warn(halt_message(row, str(exc)))
    return list(states.values())


def read_model(store: EventStore, out: Output) -> ReadModel:
    """The store's read model, warning through ``out`` at each row a fold stops at."""
    return ReadModel(store, on_halt=lambda row, reason: out.warn(halt_message(row, reason)))


def halt_message(row: StoredEvent, reason: str) -> str:
    """One line for a row a fold stopped at."""
    where = f"position {row.position}"
    if where not in reason:
        reason = (f"event at position {row.position} (trial {row.trial_id!r}, seq {row.seq}) "
                  f"does not fold: {reason}")
    return f"{reason}; trial {row.trial_id!r} is shown as of seq {row.seq - 1}"


def damage_message(row: StoredEvent) -> str:
    """One line for a row with an unreadable recorded column (its time, for instance)."""
    return (f"event at position {row.position} (trial {row.trial_id!r}, seq {row.seq}): "
            f"{row.damage}; the row is shown with that field empty")
