"""Snapshots: a trial's folded state at a sequence number, tagged with what folded it.

A snapshot is only a cache of a fold. It is trusted only when it was written by the same
state machine that would fold the events now: the tag combines the statemachine version with
a fingerprint of the compiled transition table (every trigger, source, guard, effect and
destination), so a change to the machine makes older snapshots ignored, never wrong.
"""

from __future__ import annotations

import functools
import hashlib

from statemachine.domain.compiled import TABLE
from statemachine.domain.state import CHECKPOINT_HISTORY, TrialState
from statemachine.exceptions import EventDecodeError
from statemachine.log.records import dump_json, load_json


@functools.lru_cache(maxsize=1)
def machine_version() -> str:
    """``<statemachine version>+<fingerprint of the transition table>`` (at most 32 chars)."""
    from statemachine import __version__  # late: statemachine/__init__ may import this package

    parts = [f"history={CHECKPOINT_HISTORY}"]
    for (trigger, source), branches in sorted(TABLE.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        for conditions, effects, dest in branches:
            guards = ",".join(f"{f.__name__}={t}" for f, t in conditions)
            actions = ",".join(f.__name__ for f in effects)
            parts.append(f"{trigger}|{source.value}|{guards}|{actions}|{dest}")
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]
    return f"{__version__[:19]}+{digest}"


def encode_state(state: TrialState) -> str:
    """The stored form of a state."""
    return dump_json(state.to_dict())


def decode_state(text: str, trial_id: str) -> TrialState:
    """Rebuild a stored state, or raise :class:`EventDecodeError`."""
    data = load_json(text, f"snapshot of trial {trial_id!r}")
    try:
        return TrialState.from_dict(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise EventDecodeError(f"snapshot of trial {trial_id!r} is invalid: {exc}") from None
