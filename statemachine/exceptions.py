"""The library's own exceptions: everything statemachine raises derives from one base.

Callers (the CLI, the Tune callback) catch :class:`StateMachineError` and nothing wider.
Typed *trial* failures (``RestoreError`` and friends) live in
:mod:`statemachine.domain.failures`: they describe what happened to a trial, not a misuse of
this library.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


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


class ConfigurationError(StateMachineError, ValueError):
    """A bad argument or setting (a value out of range, an unsupported database URL).

    Retrying cannot help: the message names the argument and the fix. Not a
    :class:`StoreError`, so code that retries a store that is down (the Tune recorder) never
    retries it.
    """


class UnsupportedDatabaseError(ConfigurationError):
    """The URL names a database the event log does not support (only SQLite and PostgreSQL)."""


# ---------------------------------------------------------------- the event log's errors


class StoreError(StateMachineError):
    """The event store failed; driver and SQL errors are translated into this (or a subclass)."""


class UnstorableValueError(StoreError, ValueError):
    """A value the database can never store or compare as it is; retrying cannot help.

    For example an identifier holding a lone surrogate (what ``os.fsdecode`` makes of a
    non-UTF-8 file name) or a NUL character, or a value longer than its column. The message
    names the field. Event payloads never raise it: their text is stored losslessly (lone
    surrogates as JSON ``\\uXXXX`` escapes).
    """


class StoreNotFoundError(StoreError):
    """A read-only open found no database (a missing SQLite file or an unknown database)."""


class NotAnEventLogError(StoreError):
    """The database exists but holds no statemachine event log."""


class SchemaVersionError(StoreError):
    """The database schema is newer than this code (or older, and opened read-only).

    Attributes:
        database_revision: the Alembic revision the database is at.
        code_revision: the newest revision this code knows (its head).
    """

    def __init__(self, message: str, database_revision: str | None, code_revision: str) -> None:
        super().__init__(message)
        self.database_revision = database_revision
        self.code_revision = code_revision


class FencedError(StoreError):
    """A newer driver session took the experiment; this session may no longer write."""

    def __init__(self, experiment: str, epoch: int, current_epoch: int) -> None:
        self.experiment = experiment
        self.epoch = epoch
        self.current_epoch = current_epoch
        super().__init__(
            f"experiment {experiment!r}: driver session epoch {epoch} was fenced out by a newer "
            f"session (epoch {current_epoch}); nothing was written. Only the newest driver may "
            "record events: stop this driver"
        )


class ConcurrencyError(StoreError):
    """An append expected a per-trial sequence number that is no longer the trial's last."""

    def __init__(self, message: str, trial_id: str, expected_seq: int, actual_seq: int) -> None:
        super().__init__(message)
        self.trial_id = trial_id
        self.expected_seq = expected_seq
        self.actual_seq = actual_seq


def close_matches(name: str, candidates: Iterable[str]) -> list[str]:
    """Up to three of ``candidates`` closest to ``name``, best first (the ``suggestions``)."""
    return difflib.get_close_matches(name, list(candidates), n=3, cutoff=0.5)


class UnknownExperimentError(StoreError, LookupError):
    """No experiment of that name is in the store; ``suggestions`` lists close names."""

    def __init__(
        self, name: str, suggestions: list[str], available: list[str] | None = None
    ) -> None:
        self.name = name
        self.suggestions = suggestions
        hint = f"; did you mean {', '.join(map(repr, suggestions))}?" if suggestions else ""
        if not suggestions and available is not None:
            hint = (f"; it holds {_listed(available)}" if available
                    else "; it holds no experiment yet")
        super().__init__(f"no experiment named {name!r} in this event log{hint}")


def _listed(names: list[str], most: int = 8) -> str:
    """``'a', 'b' and 3 more``: names for a one-line message."""
    shown = ", ".join(map(repr, names[:most]))
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


class ExperimentExistsError(StoreError):
    """An import into a store that already has an experiment of that name; nothing written."""


class ExportFormatError(StateMachineError, ValueError):
    """An export file that is not valid (the message names the file and line); nothing written."""


class ExportDivergedError(ExportFormatError):
    """An export whose replay diverges from what it recorded; imported only with ``force``."""

    def __init__(self, message: str, divergence: object) -> None:
        super().__init__(message)
        #: The first divergence (a :class:`statemachine.log.Divergence`).
        self.divergence = divergence


class UnknownTrialError(StoreError, LookupError):
    """The experiment has no events for that trial; ``suggestions`` lists close trial ids."""

    def __init__(self, experiment: str, trial_id: str, suggestions: list[str]) -> None:
        self.experiment = experiment
        self.trial_id = trial_id
        self.suggestions = suggestions
        hint = f"; did you mean {', '.join(map(repr, suggestions))}?" if suggestions else ""
        super().__init__(f"experiment {experiment!r} has no trial {trial_id!r}{hint}")


class CredentialsNotFoundError(StoreError):
    """A log URL's password is needed (it is never saved with the experiment) but none of the
    places it is looked up in has it; the message names each place and what it held."""


class LogSyncError(StoreError):
    """The event log's copy on the experiment's storage could not be read or written."""


class LogCopyRefusedError(LogSyncError):
    """A copy of the event log must not be used: it is another log (its identity differs),
    torn (its size or checksum is wrong), not an event log, or a folder stands where it
    should be. Retrying cannot help: the message names what was found and the fix, and
    nothing was replaced or uploaded."""


class LogFileLostError(StoreError):
    """The SQLite file of an open event log was deleted, renamed or replaced by another
    file: what was appended since went to a file no one can open again. The message names
    the file and what happened to it."""


class IngestError(StateMachineError):
    """Ray's experiment folder cannot be ingested as it is (the message says why and what to
    do); nothing was written."""


class NotARayExperimentError(IngestError):
    """The folder given to ``trial-replay ingest`` is not a Ray Tune experiment folder."""


class RecordedByCallbackError(IngestError):
    """The experiment's history was recorded by the ``EventLogCallback``: its log is complete
    and an ingest would duplicate it; nothing was written."""
