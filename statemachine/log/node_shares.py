"""The live log's node shares: each trial's share of the per-node tally, kept beside its
state and saved with its snapshot (``snapshots.nodes``), so ``trial-replay nodes`` sums one
small value per trial instead of reading the experiment's every start and failure.

A share is counted by the domain's one rule (:meth:`TrialNodes.count`) from the events the
log appended, after their append committed, in the trial's order: it is always the share
of the events up to the trial's state's seq. A trial rehydrated from a snapshot that has no
share (written before revision 0006) keeps ``None`` (not known): its snapshots say so, and
the read model reads that trial's attempts instead.
"""

from __future__ import annotations

from collections.abc import Iterable

from statemachine.domain.events import DeathCauseLearned, Event, TrialFailed, TrialStarted
from statemachine.domain.node_tally import TrialNodes
from statemachine.domain.status import Status
from statemachine.log.records import AppendRequest
from statemachine.log.snapshot import Share, decode_share

#: The events a share counts (every other event leaves it as it is).
ATTEMPT_TYPES = frozenset({TrialStarted, TrialFailed, DeathCauseLearned})


def count_share(shares: dict[str, Share], trial_id: str, seq: int, event: Event,
                restoring: bool) -> None:
    """Count the trial's attempt at ``seq`` into its share in ``shares`` (a trial missing
    there is new: its share starts empty; one whose share is not known stays so; a stored
    text is decoded first)."""
    share = shares.get(trial_id, _NEW)
    if share is _NEW:
        share = shares[trial_id] = TrialNodes()
    elif isinstance(share, str):
        share = shares[trial_id] = decode_share(share)
    if share is not None:
        share.count(seq, event, restoring)


def count_appended(shares: dict[str, Share], requests: Iterable[AppendRequest]) -> None:
    """Count the attempts among appended ``requests`` (after their append committed)."""
    for request in requests:
        event = request[1]
        if type(event) in ATTEMPT_TYPES:
            record = request[3]
            count_share(shares, request[0], request[2] + 1, event,
                        record is not None and record.status_after is Status.RESTORING)


_NEW = TrialNodes()  # a sentinel: never counted into (a missing trial gets its own share)
