"""Building many objects at once without the cyclic garbage collector walking them.

Opening an experiment decodes one state per trial (several small objects each) and a replay
builds one per event. CPython's cyclic collector runs after every 700 net allocations and, as
the heap grows, walks every object still alive: for 100,000 trials that was a third of the
decode time. None of these objects form cycles (values, frozen dataclasses, never-raised
exceptions), so reference counting frees them and the collector has nothing to find; it is
paused for the bulk step and restored after it, never left off.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused"]


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic collector inside the block (if it was on), resume it after."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
