"""Snapshots: a trial's folded state at a sequence number, tagged with the machine's revision.

A snapshot is only a cache of a fold. It is trusted only when it was written by a fold that
computes what the fold would compute now: its tag is
:data:`statemachine.domain.machine.MACHINE_REVISION`, which goes up whenever the machine's
table, a guard or effect, or the state's encoding changes what a fold computes (a golden test,
``tests/domain/test_domain_machine_revision.py``, fails on such a change made without a new
revision). A snapshot of another revision is ignored, never wrong: its trial is folded from
its events. Why a revision and not a fingerprint of the fold's bytecode: docs/design.md ("The
machine, built once").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from statemachine.domain.machine import MACHINE_REVISION
from statemachine.domain.node_tally import TrialNodes
from statemachine.domain.state import TrialState
from statemachine.exceptions import EventDecodeError
from statemachine.log.records import dump_json, load_json, parse_json


def machine_version() -> str:
    """The tag of the snapshots this code writes and trusts: ``rev<MACHINE_REVISION>``."""
    return f"rev{MACHINE_REVISION}"


def encode_state(state: TrialState) -> str:
    """The stored form of a state."""
    return dump_json(state.to_dict())


def summary_values(state: TrialState) -> dict[str, object]:
    """The summary columns a snapshot row carries beside its state (revision 0004): what
    listings filter, count and order by without decoding the state."""
    error = state.last_error
    return {
        "status": state.status.value,
        "failures": state.failures,
        "total_restore_failures": state.total_restore_failures,
        "preemptions": state.preemptions,
        "error_type": error.kind if error is not None else None,
    }


#: A trial's share of the per-node tally as a snapshot row keeps it: decoded, its stored
#: text (not decoded yet: most trials never need it), or ``None`` (not known).
Share = TrialNodes | str | None
#: The stored form of a share of no attempt (a trial that has not started yet).
NO_ATTEMPTS = dump_json(TrialNodes().to_dict())


def share_text(shares: Mapping[str, Share] | None, trial_id: str) -> str | None:
    """The ``nodes`` column of a trial's snapshot row: its share in ``shares`` (a trial
    missing there has had no attempt); ``None`` (not known) for every trial when
    ``shares`` is ``None``."""
    if shares is None:
        return None
    share = shares.get(trial_id, NO_ATTEMPTS)
    if share is None or isinstance(share, str):
        return share
    return dump_json(share.to_dict())


def decode_share(text: str) -> TrialNodes | None:
    """A stored share, or ``None`` if it does not decode (the trial's attempts are read
    instead: a snapshot is only a cache)."""
    try:
        data = parse_json(text)
        return TrialNodes.from_dict(data)
    except (AttributeError, KeyError, TypeError, ValueError, IndexError, EventDecodeError):
        return None


def decode_state(text: str, trial_id: str) -> TrialState:
    """Rebuild a stored state, or raise :class:`EventDecodeError`."""
    try:
        data = parse_json(text)
    except (TypeError, ValueError):
        data = load_json(text, f"snapshot of trial {trial_id!r}")  # raises, naming the trial
    try:
        return TrialState.from_dict(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise EventDecodeError(f"snapshot of trial {trial_id!r} is invalid: {exc}") from None


@dataclass(frozen=True, slots=True)
class SnapshotLoad:
    """The usable snapshots of an experiment's trials, and the trials whose one is unusable.

    ``unusable`` trials have a snapshot written by this state machine that does not decode;
    they are folded from all their events (:meth:`EventStore.read_tails` ``refold=``).
    """

    states: dict[str, TrialState]
    unusable: frozenset[str] = field(default_factory=frozenset)
    shares: dict[str, Share] = field(default_factory=dict)
    """Each usable snapshot's share of the per-node tally, as stored (see :data:`Share`)."""
