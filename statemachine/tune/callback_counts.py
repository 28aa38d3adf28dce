"""What an :class:`~statemachine.tune.EventLogCallback` did in this driver process: the
counts of its recorder and hooks, and the policy its decisions are made with."""

from __future__ import annotations

from statemachine.domain.policy import RetryPolicy
from statemachine.tune.log_session import LogSession
from statemachine.tune.recorder import Recorder


class CallbackCounts:
    """The callback's counts, read from its log session (none before the first trial)."""

    _session: LogSession | None
    policy: RetryPolicy | None
    hook_errors: int

    @property
    def _recorder(self) -> Recorder | None:
        return self._session.recorder if self._session else None

    @property
    def events_recorded(self) -> int:
        """Events written to the log by this driver."""
        return self._recorder.recorded if self._recorder else 0

    @property
    def events_unwritten(self) -> int:
        """Events that could not be written (yet)."""
        return self._recorder.unwritten if self._recorder else 0

    @property
    def write_failures(self) -> int:
        """Failed attempts to open the log or write to it."""
        return self._recorder.write_failures if self._recorder else 0

    @property
    def events_rejected(self) -> int:
        """Events the fold refused (not valid in the trial's folded state)."""
        return self._recorder.rejected if self._recorder else 0

    def summary(self) -> dict[str, int]:
        """The counts above as a dict (also logged at the end of the experiment)."""
        if self._session is not None:
            return self._session.summary(self.hook_errors)
        return {"recorded": 0, "unwritten": 0, "write_failures": 0, "rejected": 0,
                "hook_errors": self.hook_errors}

    @property
    def policy_in_force(self) -> RetryPolicy:
        """The policy decisions are made with (known once the first trial is seen)."""
        if self._session is not None:
            return self._session.policy
        return self.policy or RetryPolicy.from_env()
