"""Why a trial is where it is, in plain words, from its events and the policy in force.

The events are folded through the domain state machine (the compiled table, as everywhere);
each step is worded from the transition record it produced (:mod:`statemachine.cli.wording`):
the rule that fired and the numbers it counted, e.g. ``Restore failure # 2 (retry 2 of 3)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from statemachine.cli.policy_words import describe_policy
from statemachine.cli.wording import Folded, Located, word
from statemachine.domain.compiled import apply_compiled
from statemachine.domain.events import Event, RestoreSucceeded
from statemachine.domain.state import TrialState
from statemachine.domain.status import Decision, Status

__all__ = ["Explanation", "Located", "Step", "describe_policy", "explain_trial"]


@dataclass(frozen=True)
class Step:
    """One line of an explanation."""

    seq: int | None
    position: int | None
    epoch: int | None
    event: str
    decision: str | None
    text: str
    failure: bool = False
    """Whether the step is a failure (its record has an error): what ``explain`` numbers."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of this step."""
        return {
            "seq": self.seq,
            "position": self.position,
            "epoch": self.epoch,
            "event": self.event,
            "decision": self.decision,
            "text": self.text,
        }


def fold_steps(trial_id: str, events: Sequence[tuple[Located | None, Event]]) -> list[Folded]:
    """Fold ``events`` (in order), keeping the states around each and its record."""
    state = TrialState(trial_id)
    folded: list[Folded] = []
    for where, event in events:
        before = state.copy()
        record = apply_compiled(state, event)
        folded.append(Folded(where, event, before, state.copy(), record))
    for index, f in enumerate(folded):
        if isinstance(f.event, RestoreSucceeded) and _user_load_fails(folded, index):
            folded[index] = Folded(f.where, f.event, f.before, f.after, f.record, True)
    return folded


def _user_load_fails(folded: Sequence[Folded], index: int) -> bool:
    """Whether the restore closed at ``index`` is reopened by the next failure: the restore
    stays held (``unconfirmed_restore``) until a failure whose rule is the user's restore."""
    for f in folded[index + 1:]:
        if f.record.error is not None:
            return f.record.rule is not None and f.record.rule.user_restore
        if f.after.unconfirmed_restore is None:
            return False
    return False


class _Narrator:
    """Words each folded step, with the driver restarts the trial lived through."""

    def __init__(self, sessions: Mapping[int, str], kinds: Mapping[int, str | None]) -> None:
        self.sessions = sessions
        self.kinds = kinds
        self.last_epoch: int | None = None
        self.steps: list[Step] = []
        self.last_failure: Step | None = None

    def feed(self, f: Folded) -> None:
        where = f.where
        epoch = where.epoch if where is not None else None
        if epoch is not None and self.last_epoch is not None and epoch != self.last_epoch:
            self._epoch_change(self.last_epoch, epoch, f.before)
        elif epoch is not None and self.last_epoch is None and epoch > 1:
            self._first_epoch(epoch)
        if epoch is not None:
            self.last_epoch = epoch
        record = f.record
        step = Step(
            where.seq if where is not None else f.after.seq,
            where.position if where is not None else None,
            epoch,
            f.event.type_name,
            record.decision.value if record.decision else None,
            word(f),
            record.error is not None,
        )
        self.steps.append(step)
        if record.error is not None:
            self.last_failure = step

    def _epoch_change(self, old: int, new: int, s: TrialState) -> None:
        end = self.sessions.get(old, "unknown")
        how = {
            "clean": "ended cleanly",
            "crashed": "crashed (its session never ended)",
        }.get(end, "ended")
        kind = self.kinds.get(new)
        if kind == "ingest":
            self.steps.append(Step(
                None, None, new, "Ingested", None,
                f"Epoch {new} is a later trial-replay ingest of Ray's files: what the "
                f"experiment did after epoch {old}, reconstructed.",
            ))
            return
        if kind == "fresh":
            self.steps.append(Step(
                None, None, new, "DriverStarted", None,
                f"The driver of epoch {old} {how}; epoch {new} is a fresh Tuner.fit() that "
                "reuses the experiment's name, not a restore: it kept the counters the log "
                f"holds (failures {s.failures}, restore failures this episode "
                f"{s.restore_failures}, preemptions {s.preemptions}).",
            ))
            return
        by = ", a Tuner.restore," if kind == "restore" else ""
        restores = s.restore_failures or s.unconfirmed_restore_failures
        # Only a restore counter above 0 is one Ray would have lost (it never saves it).
        lost = " (Ray itself would have lost the restore counter)" if restores else ""
        self.steps.append(Step(
            None, None, new, "DriverResumed", None,
            f"The driver of epoch {old} {how}; epoch {new}{by} took over with the counters "
            f"the log kept: failures {s.failures}, restore failures this episode "
            f"{restores}, preemptions {s.preemptions}{lost}.",
        ))

    def _first_epoch(self, epoch: int) -> None:
        """A trial first seen after epoch 1: say whether its driver was a fresh run."""
        kind = self.kinds.get(epoch)
        if kind == "fresh":
            self.steps.append(Step(
                None, None, epoch, "DriverStarted", None,
                f"Epoch {epoch} is a fresh Tuner.fit() that reuses the experiment's name "
                f"(a new run, not a restore of epoch {epoch - 1}).",
            ))
        elif kind == "restore":
            self.steps.append(Step(
                None, None, epoch, "DriverResumed", None,
                f"Epoch {epoch} is a Tuner.restore of the experiment.",
            ))


@dataclass
class Explanation:
    """Why a trial is where it is."""

    trial_id: str
    state: TrialState
    summary: str
    steps: list[Step]

    def to_dict(self, experiment: str) -> dict[str, Any]:
        """The JSON form (schema ``explain`` in docs/cli.md)."""
        return {
            "experiment": experiment,
            "trial_id": self.trial_id,
            "status": self.state.status.value,
            "summary": self.summary,
            "policy": self.state.policy.to_dict(),
            "policy_text": describe_policy(self.state.policy),
            "steps": [s.to_dict() for s in self.steps],
        }


def explain_trial(
    trial_id: str,
    events: Sequence[tuple[Located | None, Event]],
    sessions: Mapping[int, str] | None = None,
    kinds: Mapping[int, str | None] | None = None,
) -> Explanation:
    """Explain ``events`` (in order, each with where it sits in the log).

    ``sessions`` maps a driver epoch to how its session ended (``clean``, ``crashed`` or
    ``open``), to word the driver restarts the trial lived through; ``kinds`` maps an epoch
    to how its driver began (``fresh``: ``Tuner.fit()``, ``restore``: ``Tuner.restore``).
    """
    narrator = _Narrator(sessions or {}, kinds or {})
    folded = fold_steps(trial_id, events)
    for f in folded:
        narrator.feed(f)
    state = folded[-1].after if folded else TrialState(trial_id)
    return Explanation(trial_id, state, _summary(state, narrator.last_failure), narrator.steps)


def _summary(state: TrialState, last_failure: Step | None) -> str:
    """What happened in words first; where the deciding failure sits in the log last."""
    counts = (f"{state.failures} failure(s), {state.total_restore_failures} restore "
              f"failure(s), {state.preemptions} preemption(s)")
    where = ""
    if last_failure is not None and last_failure.seq is not None:
        where = f"; the last failure is seq {last_failure.seq}"
        if last_failure.position is not None:
            where += f" (position {last_failure.position})"
    status = state.status
    if status is Status.ERROR and last_failure is not None:
        return (f"Trial {state.trial_id} is ERROR: it gave up. {last_failure.text} In all: "
                f"{counts}{where}.")
    if status is Status.TERMINATED:
        return f"Trial {state.trial_id} is TERMINATED: it finished after {counts}."
    if last_failure is not None and last_failure.decision != Decision.GIVE_UP.value:
        return (f"Trial {state.trial_id} is {status.value}: its last failure was recovered "
                f"from ({last_failure.decision}); {counts}{where}.")
    return f"Trial {state.trial_id} is {status.value}; {counts}."
