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
        """Whether the trial has ended (one of :data:`ENDED`)."""
        return self in ENDED

    @property
    def is_live(self) -> bool:
        """Whether the trial is in the experiment and has not ended (one of :data:`LIVE`)."""
        return self in LIVE

    def __str__(self) -> str:
        return self.value


#: The statuses of a trial that is in the experiment and has not ended.
LIVE: tuple[Status, ...] = (Status.PENDING, Status.RUNNING, Status.PAUSED, Status.RESTORING)
#: The statuses of a trial that has ended (``TrialReset`` or ``TrialRecreated`` may requeue it).
ENDED: tuple[Status, ...] = (Status.TERMINATED, Status.ERROR)


class Decision(str, Enum):
    """What the policy decided after a failure."""

    RETRY_RESTORE = "RETRY_RESTORE"
    """Restore again from the same checkpoint; ``num_failures`` unchanged."""
    RECOVER = "RECOVER"
    """Counted as a failure; start again from the latest checkpoint."""
    RECOVER_PREEMPTED = "RECOVER_PREEMPTED"
    """A preemption not counted as a failure; start again from the latest checkpoint."""
    RECOVER_NOT_COUNTED = "RECOVER_NOT_COUNTED"
    """An actor death of a cause the policy retries without counting it (``on_cause``
    retry_not_counted); start again from the latest checkpoint."""
    RESTART_FROM_SCRATCH = "RESTART_FROM_SCRATCH"
    """Restore retries spent: the checkpoints are discarded and training starts anew."""
    PREVIOUS_CHECKPOINT = "PREVIOUS_CHECKPOINT"
    """Restore retries spent: fall back to the next older checkpoint."""
    GIVE_UP = "GIVE_UP"
    """The trial ends in ``ERROR``."""

    def __str__(self) -> str:
        return self.value
