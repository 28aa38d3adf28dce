"""The trial's error file (``error.txt``): tell restore retries apart from counted failures.

Ray's ``Trial.handle_error`` appends ``Failure # N (occurred at T)`` and the error text for
every kind of failure. Right after it, the seam replaces that header with one that says what
happened, numbered as ``trial-replay explain`` numbers it: the counters that the rule which
fired incremented (:meth:`TransitionRecord.numbers`), each under its own name.

- ``Restore failure # N (retry k of R) (occurred at T)``: a restore retry (``N`` the trial's
  restore failures so far, ``k`` the retry of this restore); ``... (retry k of R refused:
  failures already exceed max_failures) ... [RestoreError; decision GIVE_UP]`` when the
  trial was already past ``max_failures``;
- ``Failure # N (occurred at T) [RestoreError: restore failure # M, restore retries spent
  (R of R); decision D]``: a restore failure past its retries, counted as failure ``N``;
- ``Preemption # P (occurred at T) [ActorError, not counted as a failure; decision D]``;
- ``Uncounted CAUSE # K (occurred at T) [ActorError, not counted as a failure; decision D]``:
  an actor death of a cause the policy retries uncounted (``on_cause``), its ``K``-th;
- ``Failure # N (occurred at T) [Kind; decision D]``: every other counted failure.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from statemachine.domain.machine import TransitionRecord
from statemachine.domain.policy import RetryPolicy
from statemachine.domain.status import Decision

_RAY_HEADER = re.compile(r"^Failure # -?\d+ \(occurred at (?P<when>[^)]*)\)$")


def header_for(record: TransitionRecord, policy: RetryPolicy, when: str) -> str:
    """The header line for the failure ``record`` describes (without a newline)."""
    numbers = record.numbers()
    kind = record.error.kind if record.error is not None else "TrialError"
    decision = record.decision.value if record.decision else "none"
    occurred = f"(occurred at {when})"
    retries = policy.restore_retry_num
    if numbers.retry is not None:
        retry = f"retry {numbers.retry} of {retries}"
        if record.decision is Decision.RETRY_RESTORE:
            return f"Restore failure # {numbers.restore_failure} ({retry}) {occurred}"
        return (f"Restore failure # {numbers.restore_failure} ({retry} refused: failures "
                f"already exceed max_failures) {occurred} [{kind}; decision {decision}]")
    if numbers.preemption is not None:
        return (f"Preemption # {numbers.preemption} {occurred} [{kind}, not counted as a "
                f"failure; decision {decision}]")
    if numbers.cause_retry is not None:
        cause = getattr(record.error, "cause", "unknown")
        return (f"Uncounted {cause} # {numbers.cause_retry} {occurred} [{kind}, not counted "
                f"as a failure; decision {decision}]")
    detail = kind
    if numbers.restore_failure is not None:
        detail = (f"{kind}: restore failure # {numbers.restore_failure}, restore retries spent "
                  f"({retries} of {retries})")
    return f"Failure # {numbers.failure} {occurred} [{detail}; decision {decision}]"


def rewrite_last_header(path: str | os.PathLike[str], record: TransitionRecord,
                        policy: RetryPolicy) -> bool:
    """Replace the last ``Failure # N (occurred at T)`` line Ray wrote in ``path``.

    Returns whether a header was replaced; the file is rewritten atomically (a crash leaves
    either the old or the new text, never a truncated file).
    """
    file = Path(path)
    try:
        lines = file.read_text(encoding="utf-8").splitlines(keepends=True)
    except FileNotFoundError:
        return False
    for index in range(len(lines) - 1, -1, -1):
        match = _RAY_HEADER.match(lines[index].rstrip("\n"))
        if match:
            lines[index] = header_for(record, policy, match.group("when")) + "\n"
            break
    else:
        return False
    tmp = file.with_name(f".{file.name}.statemachine-tmp")
    tmp.write_text("".join(lines), encoding="utf-8")
    os.replace(tmp, file)
    return True
