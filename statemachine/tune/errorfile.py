"""The trial's error file (``error.txt``): tell restore retries apart from counted failures.

Ray's ``Trial.handle_error`` appends ``Failure # N (occurred at T)`` and the error text for
every kind of failure. Right after it, the seam replaces that header with one that says what
happened: ``Restore failure # N (retry k of R)`` for a restore failure that did not count
against ``max_failures``, and ``Failure # N`` (with the failure kind and the decision) for
everything else, N being the trial's failure count as our fold computed it.
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
    counters = record.counters
    kind = type(record.error).__name__ if record.error is not None else "TrialError"
    decision = record.decision.value if record.decision else "none"
    if record.decision is Decision.RETRY_RESTORE:
        return (
            f"Restore failure # {counters.total_restore_failures} "
            f"(retry {counters.restore_failures} of {policy.restore_retry_num}) "
            f"(occurred at {when})"
        )
    detail = f"{kind}; decision {decision}"
    if kind == "RestoreError":
        detail = f"{kind} after {policy.restore_retry_num} restore retries; decision {decision}"
    return f"Failure # {counters.failures} (occurred at {when}) [{detail}]"


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
