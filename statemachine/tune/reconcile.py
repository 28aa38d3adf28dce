"""After ``Tuner.restore``: what to record for a restored trial, and which budgets Ray gets back.

A new driver restores its trials from Ray's experiment snapshot, which may be older than the
event log, and Ray never saves the restore-failure counter at all. :func:`reconcile` compares
one trial's folded state with what Ray restored and says what the new driver must do. It is
pure: no Ray, no I/O; :mod:`statemachine.tune.after_restore` reads Ray's side and applies
the answer (through :mod:`statemachine.tune.ray_surface`).

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

A new trial behind the id of an ended one (Ray PENDING, never run, no failure, no checkpoint:
``ray_fresh``, while the log's trial has failures or checkpoints Ray would have restored with
it) is recorded as ``TrialRecreated`` (a new incarnation with its own counters) instead of
``TrialReset``.

Then, on the state with that event folded in, the failure counters (who knows the trial's
whole history?):

=============================  ==================================  =========================
the log holds                  Ray's restored state is fresh       Ray's state is stale
                               (its count = the log's)             (older than the last
                                                                   failures: lower count)
=============================  ==================================  =========================
the whole history              nothing to do                       the log's count to Ray
part of it (Ray counts more)   ``CountersAdopted`` of Ray's count  as fresh (Ray's count,
                                                                   the higher, is adopted)
nothing (trial not in log)     ``CountersAdopted`` of Ray's count  as fresh
=============================  ==================================  =========================

So Ray's count is never lowered: the log's count replaces it only when the log holds the
trial's whole history (a count at least Ray's); otherwise Ray's count is adopted and recorded
with where it came from (:data:`ADOPTED_FROM`), after which the log holds the whole history
again. Ray's ``num_restore_failures`` gets the log's restore-failure count when it is not zero
and Ray will restore the very checkpoint that count refers to (``TrialState.restoring_from``):
a restore budget spent before the crash stays spent, another checkpoint starts afresh (Ray
never saves that counter, so there is nothing of Ray's to adopt).
"""

from __future__ import annotations

from dataclasses import dataclass

from statemachine.domain.compiled import apply_compiled
from statemachine.domain.events import (
    CountersAdopted,
    Event,
    TrialPaused,
    TrialRecreated,
    TrialReset,
    TrialResumed,
    TrialStopped,
)
from statemachine.domain.state import TrialState
from statemachine.domain.status import Status
from statemachine.exceptions import InvalidTransitionError

#: Ray's trial status strings (``ray.tune.experiment.Trial.PENDING`` etc.).
RAY_PENDING, RAY_RUNNING, RAY_PAUSED, RAY_TERMINATED, RAY_ERROR = (
    "PENDING", "RUNNING", "PAUSED", "TERMINATED", "ERROR",
)
RAY_STATUSES = (RAY_PENDING, RAY_RUNNING, RAY_PAUSED, RAY_TERMINATED, RAY_ERROR)

#: The reason ``TrialStopped`` gives for a live trial that ``Tuner.restore`` did not resume.
NOT_RESUMED = "not resumed by Tuner.restore"

#: Where adopted counters come from (``CountersAdopted.source``).
ADOPTED_FROM = "Ray's restored experiment state"

#: The reason ``TrialRecreated`` gives.
REUSED_ID = "Ray created a new trial with this id"


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
    adopted: CountersAdopted | None = None
    """Recorded after :attr:`event`: Ray's counters, adopted because the log does not hold the
    trial's whole history (``None``: the log's counters stand)."""


def has_history(state: TrialState) -> bool:
    """Whether the trial left anything Ray would have restored with it (a failure, a
    preemption, a restore failure, a checkpoint): without any, Ray's trial that never ran may
    just as well be the same one, requeued (a ``TrialReset``, the same counters)."""
    return bool(state.failures or state.preemptions or state.total_restore_failures
                or state.checkpoints)


def history_known(known: bool, log_failures: int, ray_num_failures: int) -> str:
    """How much of the trial's failure history the log holds: ``"whole"``, ``"part"`` or
    ``"none"``.

    ``known``: the log had the trial before this driver. Ray's count comes from what this
    package put into Ray (the log's count at Ray's last snapshot), so a Ray count above the
    log's means failures the log never saw.
    """
    if not known:
        return "none"
    return "part" if ray_num_failures > log_failures else "whole"


def requeue_event(log_status: Status, ray_status: str) -> Event | None:
    """The event that brings the log to how Ray requeued the trial, or ``None``."""
    if log_status in (Status.RUNNING, Status.RESTORING, Status.PAUSED):
        if ray_status == RAY_PENDING:
            return TrialResumed()
    if log_status.is_terminal and ray_status in (RAY_PENDING, RAY_PAUSED):
        return TrialReset(from_scratch=False)
    if log_status.is_live and ray_status == RAY_TERMINATED:
        return TrialStopped(reason=NOT_RESUMED)
    return None


#: The reason ``TrialStopped`` gives for a live trial Ray marked TERMINATED at the end.
ENDED_WITH_EXPERIMENT = "the experiment ended"

#: The reason ``TrialStopped`` gives for a live trial Ray left TERMINATED at the end of a step
#: with no hook saying why (an experiment-wide stop, the cleanup of an aborted driver).
STOPPED_BY_TUNE = "stopped by Tune"


def end_event(log_status: Status, ray_status: str) -> Event | None:
    """At the end of an experiment: the event that brings the log to Ray's final status.

    Ray stops what is left when an experiment ends early (``fail_fast``, a stopper, a time
    budget): trials that never started are TERMINATED. A driver interrupted by SIGINT leaves
    unfinished trials PENDING (or PAUSED) for ``Tuner.restore``. A trial ERROR in Ray only
    has no event (its failure is Ray's; reported by the callback).
    """
    if log_status.is_live and ray_status == RAY_TERMINATED:
        return TrialStopped(reason=ENDED_WITH_EXPERIMENT)
    if log_status is Status.RUNNING and ray_status == RAY_PAUSED:
        return TrialPaused()
    if log_status in (Status.RUNNING, Status.RESTORING, Status.PAUSED) \
            and ray_status == RAY_PENDING:
        return TrialResumed()
    return None


def reconcile(state: TrialState, ray_status: str, ray_num_failures: int,
              ray_checkpoint: str | None, *, known: bool = True,
              ray_fresh: bool = False) -> Reconciliation:
    """Align one trial after ``Tuner.restore``; ``state`` is left unchanged.

    Args:
        state: the trial's folded state from the log.
        ray_status: Ray's restored ``Trial.status``.
        ray_num_failures: Ray's restored ``num_failures``.
        ray_checkpoint: the path of the checkpoint Ray will restore the trial from, or ``None``.
        known: the log held the trial before this driver (``False``: ``state`` is the one
            just added for it).
        ray_fresh: Ray's trial never ran (no result, failure or checkpoint): behind an id
            the log has seen ended, it is a new trial (``TrialRecreated``).
    """
    event = requeue_event(state.status, ray_status)
    if (isinstance(event, TrialReset) and ray_fresh and ray_status == RAY_PENDING
            and has_history(state)):
        event = TrialRecreated(reason=REUSED_ID)
    after = state
    if event is not None:
        after = state.copy()
        try:
            apply_compiled(after, event)
        except InvalidTransitionError:  # the recorder refuses it too: budgets as they were
            after = state
    spent = after.restore_failures
    restore_failures = spent if spent and after.restoring_from == ray_checkpoint else None
    adopted = None
    failures: int | None = None
    if history_known(known, after.failures, ray_num_failures) == "whole":
        failures = after.failures if after.failures != ray_num_failures else None
    elif ray_num_failures != after.failures:
        adopted = CountersAdopted(failures=ray_num_failures, preemptions=after.preemptions,
                                  source=ADOPTED_FROM)
    return Reconciliation(
        event=event,
        error_in_ray_only=state.status.is_live and ray_status == RAY_ERROR,
        failures=failures,
        restore_failures=restore_failures,
        adopted=adopted,
    )
