"""Read the checkpoints out of Ray's pickled checkpoint manager without unpickling it.

Ray saves each trial's checkpoint manager in ``experiment_state-*.json`` as a hex cloudpickle
blob. Loading a pickle runs code named in it, so an ingest never does: this module walks the
blob's opcodes with :func:`pickletools.genops` (a parser: it imports, calls and builds
nothing) and keeps only the text and numbers pushed, resolving memo references. In that
stream each tracked checkpoint's path is followed by its result's metrics, among them
``training_iteration`` and ``timestamp``: which iteration each kept checkpoint saved, the
one thing a class trainable's files do not say otherwise.
"""

from __future__ import annotations

import pickletools
import re
from collections.abc import Iterator

from statemachine.ingest.model import KnownCheckpoint

__all__ = ["checkpoints_in_manager", "scalars"]

_CHECKPOINT = re.compile(r"(?:^|/)(checkpoint_\d+)/?$")
_TEXT = frozenset({"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE",
                   "SHORT_BINSTRING", "BINSTRING", "STRING"})
_NUMBER = frozenset({"BININT", "BININT1", "BININT2", "INT", "LONG", "LONG1", "LONG4",
                     "BINFLOAT", "FLOAT"})
_GET = frozenset({"BINGET", "LONG_BINGET", "GET"})
_PUT = frozenset({"BINPUT", "LONG_BINPUT", "PUT"})
#: Opcodes that change nothing on top of the stack.
_NEUTRAL = frozenset({"PROTO", "FRAME", "MARK", "MEMOIZE", *_PUT, "STOP"})

Scalar = str | int | float | None


def scalars(blob: bytes) -> Iterator[Scalar]:
    """The text and numbers a pickle pushes, in order, memo references resolved.

    Anything else pushed (objects, containers) yields nothing; a malformed or truncated
    pickle ends the stream where it breaks (no exception).
    """
    memo: dict[int, Scalar] = {}
    top: Scalar = None
    try:
        for opcode, arg, _ in pickletools.genops(blob):
            name = opcode.name
            if name in _TEXT or name in _NUMBER:
                top = arg if isinstance(arg, (str, int, float)) else None
                if isinstance(arg, bytes):
                    top = arg.decode("utf-8", "replace")
                if top is not None:
                    yield top
            elif name in _GET:
                top = memo.get(int(arg)) if isinstance(arg, int) else None
                if top is not None:
                    yield top
            elif name == "MEMOIZE":
                memo[len(memo)] = top
            elif name in _PUT and isinstance(arg, int):
                memo[arg] = top
            elif name not in _NEUTRAL:
                top = None
    except Exception:
        return


def checkpoints_in_manager(blob: bytes) -> list[KnownCheckpoint]:
    """The checkpoints a pickled checkpoint manager tracks, with the iteration and time of the
    result each one saved (``None`` where the stream does not say), in the pickle's order."""
    found: dict[str, KnownCheckpoint] = {}
    current: str | None = None
    iteration: int | None = None
    timestamp: float | None = None
    pending: str | None = None  # a metric key whose value comes next
    for value in scalars(blob):
        if pending is not None:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                if pending == "training_iteration" and iteration is None:
                    iteration = int(value)
                elif pending == "timestamp" and timestamp is None:
                    timestamp = float(value)
            pending = None
            continue
        if isinstance(value, str):
            match = _CHECKPOINT.search(value)
            if match is not None:
                if current is not None and current not in found:
                    found[current] = KnownCheckpoint(current, iteration, timestamp)
                current, iteration, timestamp = match.group(1), None, None
                continue
            if current is not None and value in ("training_iteration", "timestamp"):
                pending = value
    if current is not None and current not in found:
        found[current] = KnownCheckpoint(current, iteration, timestamp)
    return list(found.values())
