"""Trial statuses and the decisions a failure leads to."""

from __future__ import annotations

from enum import Enum


class Status(str, Enum):
    """The status of a trial. ``NEW`` exists only before the trial's first event."""

    NEW = "NEW"
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    RESTORING = "RESTORING"
    TERMINATED = "TERMINATED"
    ERROR = "ERROR"

    @property
    def is_terminal(self) -> bool:
        """Whether the trial has ended (``TERMINATED`` or ``ERROR``)."""
        return self in (Status.TERMINATED, Status.ERROR)

    def __str__(self) -> str:
        return self.value


class Decision(str, Enum):
    """What the policy decided after a failure."""

    RETRY_RESTORE = "RETRY_RESTORE"
    """Restore again from the same checkpoint; ``num_failures`` unchanged."""
    RECOVER = "RECOVER"
    """Counted as a failure; start again from the latest checkpoint."""
    RECOVER_PREEMPTED = "RECOVER_PREEMPTED"
    """A preemption not counted as a failure; start again from the latest checkpoint."""
    RESTART_FROM_SCRATCH = "RESTART_FROM_SCRATCH"
    """Restore retries spent: the checkpoints are discarded and training starts anew."""
    PREVIOUS_CHECKPOINT = "PREVIOUS_CHECKPOINT"
    """Restore retries spent: fall back to the next older checkpoint."""
    GIVE_UP = "GIVE_UP"
    """The trial ends in ``ERROR``."""

    def __str__(self) -> str:
        return self.value
