"""Checkpoints as ``explain`` names them, and Ray's numbering that starts over.

Ray names a checkpoint by its index in the attempt that saved it (``checkpoint_000003``); a
function trainable restored from ``checkpoint_000003`` saves ``checkpoint_000000`` next, so
the newest checkpoint can carry a smaller number than the one it continues from. A saved
checkpoint numbered below one the trial still holds is therefore worded with its training
iteration and the checkpoint it is newer than.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from statemachine.domain.events import CheckpointSaved

_NUMBERED = re.compile(r"checkpoint_(\d+)")


def checkpoint_name(path: str | None) -> str:
    """A checkpoint as people read it: its last path component (``show`` has the full path)."""
    if not path:
        return "scratch"
    return path.rstrip("/").rsplit("/", 1)[-1]


def _number(path: str) -> int | None:
    found = _NUMBERED.fullmatch(checkpoint_name(path))
    return int(found.group(1)) if found else None


def saved_words(held: Sequence[str], event: CheckpointSaved) -> str:
    """The words for ``event``, given the checkpoints the trial held before it: ``Saved
    checkpoint_000004.``, or when a checkpoint it held has a higher number (Ray's numbering
    started over) ``Saved checkpoint_000000 at training_iteration 5 (newer than
    checkpoint_000003: Ray numbers checkpoints from 000000 again after a restore).``"""
    name = checkpoint_name(event.checkpoint)
    number = _number(event.checkpoint)
    higher = [(n, c) for c in held if c != event.checkpoint
              and (n := _number(c)) is not None and number is not None and n > number]
    if not higher:
        return f"Saved {name}."
    at = f" at training_iteration {event.iteration}" if event.iteration is not None else ""
    return (f"Saved {name}{at} (newer than {checkpoint_name(max(higher)[1])}: Ray numbers "
            "checkpoints from 000000 again after a restore).")
