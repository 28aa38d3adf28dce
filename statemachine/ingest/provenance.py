"""Which events of a log are reconstructed from Ray's files, and what such a history lacks.

The one owner of that knowledge for every view (``explain``, ``show``, ``trials``, the web
pages, ``--json``): an event is reconstructed exactly when its epoch is a session of kind
``ingest`` (``trial-replay ingest``), so a view needs only the experiment's sessions, which
it reads anyway. :data:`NOT_KNOWN` says, once, what Ray's files cannot tell.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from statemachine.log.records import INGEST_KIND, SessionInfo

__all__ = ["NOT_KNOWN", "provenance", "reconstructed_epochs", "reconstructed_note"]

#: What a history reconstructed from Ray's files cannot know (shown with it).
NOT_KNOWN: tuple[str, ...] = (
    "Times are Ray's, to the second (result rows' timestamp; error.txt's 'occurred at', the "
    "driver's local time); within one second, events are in the order that must hold.",
    "Starts, restores and first results are inferred from the results: a new process or "
    "iterations_since_restore starting again. An attempt that failed before its first "
    "result is known only from its failure.",
    "TUNE_RESTORE_RETRY_NUM is saved nowhere: the policy's restore_retry_num is the longest "
    "run of restore failures error.txt shows without counting (a lower bound).",
    "Failures Ray never wrote down are missing (after a driver crash error.txt reaches the "
    "experiment's storage late; error.pkl keeps only the last error and is a pickle, never "
    "read). Where Ray's num_failures is higher, its count was adopted (CountersAdopted).",
    "Checkpoints deleted by num_to_keep are known only when a function trainable's result "
    "named them; a class trainable's are placed by the iteration Ray's checkpoint manager "
    "recorded, else by the folder's time; one Ray writes again under a name already "
    "recorded (after a resume) is recorded once.",
    "A pause and a driver restart look alike: an attempt that ended without a failure and "
    "ran again is recorded as queued again (TrialResumed).",
    "Nodes are known by IP address (node_ip) only: Ray's files hold no node ids; "
    "preemptions only where an actor death's text says so.",
)


def reconstructed_epochs(sessions: Iterable[SessionInfo]) -> set[int]:
    """The epochs whose events were reconstructed from Ray's files."""
    return {s.epoch for s in sessions if s.kind == INGEST_KIND}


def provenance(sessions: Iterable[SessionInfo], epochs: Iterable[int] | None = None
               ) -> dict[str, Any] | None:
    """The ``reconstructed`` object of a ``--json`` output, or ``None`` when none of the
    events shown (``epochs``; default: all) was reconstructed.

    ``{"from": "ray_files", "epochs": [...], "not_known": [...]}``.
    """
    ingested = reconstructed_epochs(sessions)
    if epochs is not None:
        ingested &= set(epochs)
    if not ingested:
        return None
    return {"from": "ray_files", "epochs": sorted(ingested), "not_known": list(NOT_KNOWN)}


def reconstructed_note(sessions: Iterable[SessionInfo], epochs: Iterable[int] | None = None
                       ) -> str | None:
    """One line for people when the events shown were reconstructed (else ``None``)."""
    found = provenance(sessions, epochs)
    if found is None:
        return None
    listed = ", ".join(str(e) for e in found["epochs"])
    return (f"Reconstructed from Ray's files by trial-replay ingest (epoch {listed}), not "
            "recorded as it happened: times to the second, starts inferred from results, "
            "restore_retry_num a lower bound, failures Ray never wrote down missing "
            "(trial-replay ingest --help, docs/cli.md).")
