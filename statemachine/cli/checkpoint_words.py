"""Checkpoints as ``explain`` names them, and Ray's numbering that starts over.

Ray names a checkpoint by a counter kept with the trial (``checkpoint_000003``). The counter
can go back: a ``Tuner.restore`` continues from the count in Ray's saved experiment state,
which may be older than the checkpoints the log saw (the callback moves it forward when it
advances the resume, ``ray_surface/checkpoint_manager.py``), and a restored trainable was
reported to start again at ``checkpoint_000000``. Then the newest checkpoint carries a
smaller number than one it is newer than, so a saved checkpoint numbered below one the
trial still holds is worded with its training iteration and the newest of those.
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
    checkpoint_000004.``, or when a checkpoint it held has a higher number ``Saved
    checkpoint_000000 at training_iteration 5 (Ray's numbering started over: this is newer
    than checkpoint_000003).``"""
    name = checkpoint_name(event.checkpoint)
    number = _number(event.checkpoint)
    higher = [(n, c) for c in held if c != event.checkpoint
              and (n := _number(c)) is not None and number is not None and n > number]
    if not higher:
        return f"Saved {name}."
    at = f" at training_iteration {event.iteration}" if event.iteration is not None else ""
    return (f"Saved {name}{at} (Ray's numbering started over: this is newer than "
            f"{checkpoint_name(max(higher)[1])}).")
