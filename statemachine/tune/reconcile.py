"""After ``Tuner.restore``: what to record for a restored trial, and which budgets Ray gets back.

A new driver restores its trials from Ray's experiment snapshot, which may be older than the
event log, and Ray never saves the restore-failure counter at all. :func:`reconcile` compares
one trial's folded state with what Ray restored and says what the new driver must do. It is
pure: no Ray, no I/O; the callback reads Ray's side and applies the answer
(:mod:`statemachine.tune.ray_surface`).

The rules, log status x Ray status (statuses as strings, Ray's ``Trial.status``):

=====================================  ===========  ==========================================
log status                             Ray status   event to record
=====================================  ===========  ==========================================
RUNNING, RESTORING                     PENDING      ``TrialResumed`` (the crash interrupted it)
PAUSED                                 PENDING      ``TrialResumed``
TERMINATED, ERROR                      PENDING,     ``TrialReset(from_scratch=False)``
                                       PAUSED       (``resume_errored``)
PENDING, RUNNING, PAUSED, RESTORING    TERMINATED   ``TrialStopped`` (not resumed)
PENDING, RUNNING, PAUSED, RESTORING    ERROR        none; reported (:attr:`error_in_ray_only`)
anything else                                       none
=====================================  ===========  ==========================================

Then, on the state with that event folded in:

- Ray's ``num_failures`` gets the log's failure count when the two differ;
- Ray's ``num_restore_failures`` gets the log's restore-failure count when it is not zero and
  Ray will restore the very checkpoint that count refers to (``TrialState.restoring_from``):
  a restore budget spent before the crash stays spent, another checkpoint starts afresh.
"""

from __future__ import annotations

from dataclasses import dataclass

from statemachine.domain.events import Event, TrialReset, TrialResumed, TrialStopped
from statemachine.domain.machine import apply
from statemachine.domain.state import TrialState
from statemachine.domain.status import Status
from statemachine.exceptions import InvalidTransitionError

#: Ray's trial status strings (``ray.tune.experiment.Trial.PENDING`` etc.).
RAY_PENDING, RAY_RUNNING, RAY_PAUSED, RAY_TERMINATED, RAY_ERROR = (
    "PENDING", "RUNNING", "PAUSED", "TERMINATED", "ERROR",
)
RAY_STATUSES = (RAY_PENDING, RAY_RUNNING, RAY_PAUSED, RAY_TERMINATED, RAY_ERROR)

#: Log statuses of a trial that has not ended.
LIVE = frozenset({Status.PENDING, Status.RUNNING, Status.PAUSED, Status.RESTORING})

#: The reason ``TrialStopped`` gives for a live trial that ``Tuner.restore`` did not resume.
NOT_RESUMED = "not resumed by Tuner.restore"


@dataclass(frozen=True)
class Reconciliation:
    """What a new driver does with one restored trial (see the module's rules)."""

    event: Event | None = None
    """The event that records how Ray requeued the trial, or ``None``."""
    error_in_ray_only: bool = False
    """Ray restored the trial as ERROR while the log has it live (reported, nothing recorded)."""
    failures: int | None = None
    """Put into Ray's ``num_failures`` (the log's count); ``None``: Ray's count already agrees."""
    restore_failures: int | None = None
    """Put into Ray's ``num_restore_failures``; ``None``: leave Ray's (zero after a restore)."""


def requeue_event(log_status: Status, ray_status: str) -> Event | None:
    """The event that brings the log to how Ray requeued the trial, or ``None``."""
    if log_status in (Status.RUNNING, Status.RESTORING, Status.PAUSED):
        if ray_status == RAY_PENDING:
            return TrialResumed()
    if log_status.is_terminal and ray_status in (RAY_PENDING, RAY_PAUSED):
        return TrialReset(from_scratch=False)
    if log_status in LIVE and ray_status == RAY_TERMINATED:
        return TrialStopped(reason=NOT_RESUMED)
    return None


def reconcile(state: TrialState, ray_status: str, ray_num_failures: int,
              ray_checkpoint: str | None) -> Reconciliation:
    """Align one trial after ``Tuner.restore``; ``state`` is left unchanged.

    Args:
        state: the trial's folded state from the log.
        ray_status: Ray's restored ``Trial.status``.
        ray_num_failures: Ray's restored ``num_failures``.
        ray_checkpoint: the path of the checkpoint Ray will restore the trial from, or ``None``.
    """
    event = requeue_event(state.status, ray_status)
    after = state
    if event is not None:
        after = state.copy()
        try:
            apply(after, event)
        except InvalidTransitionError:  # the recorder refuses it too: budgets as they were
            after = state
    spent = after.restore_failures
    return Reconciliation(
        event=event,
        error_in_ray_only=state.status in LIVE and ray_status == RAY_ERROR,
        failures=after.failures if after.failures != ray_num_failures else None,
        restore_failures=spent if spent and after.restoring_from == ray_checkpoint else None,
    )
