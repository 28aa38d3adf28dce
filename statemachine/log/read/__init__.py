"""The read model: experiments, trials and nodes as they are now, from snapshots plus the
events after them (see :mod:`statemachine.log.read.model`)."""

from statemachine.log.read.model import OnHalt, ReadModel
from statemachine.log.read.summary import (
    SORTS,
    STATUSES,
    Changes,
    ExperimentSummary,
    Page,
    TrialSummary,
)

__all__ = [
    "SORTS",
    "STATUSES",
    "Changes",
    "ExperimentSummary",
    "OnHalt",
    "Page",
    "ReadModel",
    "TrialSummary",
]
