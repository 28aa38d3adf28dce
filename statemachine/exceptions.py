"""The library's own exceptions: everything statemachine raises derives from one base.

Callers (the CLI, the Tune callback) catch :class:`StateMachineError` and nothing wider.
Typed *trial* failures (``RestoreError`` and friends) live in
:mod:`statemachine.domain.failures`: they describe what happened to a trial, not a misuse of
this library.
"""

from __future__ import annotations


class StateMachineError(Exception):
    """Base class of every error this library raises on purpose."""


class PolicyError(StateMachineError, ValueError):
    """A retry policy field has an invalid value; the message names the field."""


class InvalidTransitionError(StateMachineError):
    """An event is not valid in the trial's current state; nothing was changed."""

    def __init__(self, trial_id: str, status: str, event: str) -> None:
        self.trial_id = trial_id
        self.status = status
        self.event = event
        super().__init__(
            f"trial {trial_id!r}: event {event!r} is not valid in state {status}; "
            "the event was not applied"
        )


class EventDecodeError(StateMachineError):
    """A stored event could not be decoded (unknown type or version, or a bad payload)."""
