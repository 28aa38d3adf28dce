"""A retry policy in plain words, as ``explain``, ``what-if`` and the web pages show it."""

from __future__ import annotations

from statemachine.domain.policy import RestorePhase, RetryPolicy


def describe_policy(policy: RetryPolicy) -> str:
    """The policy as one line of plain words."""
    limit = "unlimited" if policy.max_failures < 0 else str(policy.max_failures)
    parts = [
        f"max_failures={limit}",
        f"restore_retry_num={policy.restore_retry_num}",
        f"on_restore_exhausted={policy.on_restore_exhausted.value}",
        "preemptions count as failures" if policy.count_preemption_as_failure
        else "preemptions do not count as failures",
    ]
    if policy.max_preemptions is not None:
        parts.append(f"max_preemptions={policy.max_preemptions}")
    if policy.fatal_exception_types:
        parts.append(f"fatal types: {', '.join(policy.fatal_exception_types)}")
    if policy.delete_discarded_checkpoints:
        parts.append("discarded checkpoints are deleted")
    if policy.avoid_failed_nodes:
        parts.append(f"restore retries avoid the nodes that failed (waiting up to "
                     f"{policy.avoid_nodes_wait_s} s for another node)")
    if policy.restore_phase is RestorePhase.UNTIL_FIRST_REPORT:
        parts.append("a failure after a restore and before the attempt's first result is a "
                     "restore failure (restore_phase=until_first_report)")
    for cause, action in policy.on_cause.items():
        budget = policy.cause_budgets.get(cause)
        parts.append(f"on_cause {cause}={action.value}"
                     + (f" (at most {budget})" if budget is not None else ""))
    if policy.give_up_on_repeats is not None:
        parts.append(f"give up after {policy.give_up_on_repeats} identical failures in a row "
                     "at the same iteration (give_up_on_repeats)")
    return ", ".join(parts)
