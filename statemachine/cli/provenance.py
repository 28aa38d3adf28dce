"""What the views add to a history reconstructed from Ray's files (``trial-replay ingest``).

The views call these two helpers and nothing else of it: :func:`with_provenance` adds the
``reconstructed`` key to a ``--json`` object, :func:`reconstructed_note` gives the line people
read. Which events are reconstructed, and what such a history cannot know, is owned by
:mod:`statemachine.ingest.provenance`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from statemachine.ingest.provenance import provenance, reconstructed_note
from statemachine.log.records import SessionInfo

__all__ = ["reconstructed_note", "with_provenance"]


def with_provenance(data: dict[str, Any], sessions: Iterable[SessionInfo],
                    epochs: Iterable[int] | None = None) -> dict[str, Any]:
    """``data`` with ``"reconstructed": {...}`` added when any of the events it shows
    (``epochs``; default: all) was reconstructed from Ray's files; unchanged otherwise (the
    key is present only then: docs/cli.md)."""
    found = provenance(sessions, epochs)
    if found is not None:
        data["reconstructed"] = found
    return data
