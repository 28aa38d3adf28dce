"""Benchmark: what the trial state machine costs to build per trial and to fold per event.

Two tables, every number a median over several rounds with the min and max beside it:

1. Build cost per trial for 1k, 10k and 100k trials: our way (plain ``TrialState`` objects
   driven by the one shared ``transitions.Machine``) beside the naive ways (a ``Machine`` per
   trial; one ``Machine`` with ``add_model`` per trial). Our way builds 100k trials per round
   at every size (in batches of the size), so the sizes are compared over equal work. A naive
   way builds one batch per round and runs at a size only when its projected time for one
   round is under ``--budget`` seconds; otherwise the row says so.
2. Fold cost per event on a generated history of valid events: the ``transitions`` path, the
   compiled table (``apply_compiled``, with records; ``fold_compiled``, without), and a
   hand-written plain-dict transition table with the same guards, measured in the same run
   as the baseline. The baseline lives only here; before timing, it is checked to reach the
   very same final states as the fold, so it does the same work.

Run: ``python -m benchmarks.fsm`` (from the repository root) for both tables; the fold and
decode figures are also section ``fold`` of ``python -m benchmarks`` (:func:`run`).
"""

from __future__ import annotations

import gc
import platform
import random
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import click
import transitions
from rich.console import Console
from rich.table import Table

from benchmarks.harness import Context, interleaved, per_unit
from statemachine.domain.compiled import apply_compiled, fold_compiled
from statemachine.domain.events import (
    EVENT_TYPES,
    CheckpointSaved,
    CheckpointsDiscarded,
    Event,
    PolicySet,
    RestoreSucceeded,
    TrialAdded,
    TrialCompleted,
    TrialFailed,
    TrialPaused,
    TrialReset,
    TrialResumed,
    TrialStarted,
    TrialStopped,
    decode_event,
    encode_event,
)
from statemachine.domain.failures import ActorError, RestoreError, TrainingError, TrialError
from statemachine.domain.machine import TrialMachine, apply, fold, transition_table
from statemachine.domain.policy import ExhaustionAction, RetryPolicy
from statemachine.domain.state import CHECKPOINT_HISTORY, TrialState
from statemachine.domain.status import Decision, Status

SIZES = (1_000, 10_000, 100_000)


@dataclass
class Timing:
    """Seconds per round (each round does ``units`` units of work)."""

    rounds: list[float]
    units: int

    def per_unit_us(self) -> tuple[float, float, float]:
        """(median, min, max) microseconds per unit."""
        per = [r / self.units * 1e6 for r in self.rounds]
        return statistics.median(per), min(per), max(per)


def measure(work: Callable[[], Any], units: int, rounds: int) -> Timing:
    """Time ``work`` ``rounds`` times (GC collected before, enabled during: as in real use)."""
    times = []
    for _ in range(rounds):
        gc.collect()
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return Timing(times, units)


# ---------------------------------------------------------------- build cost per trial


class _Model:
    """A bare trial object for the naive ways (``transitions`` attaches triggers to it)."""


def build_shared(n: int) -> list[TrialState]:
    """Our way: plain TrialState objects, each added through the one shared Machine."""
    trials = [TrialState(f"t{i}") for i in range(n)]
    added = TrialAdded()
    for trial in trials:
        apply(trial, added)
    return trials


def build_states_only(n: int) -> list[TrialState]:
    """Our way, before the first event: with one shared Machine this is the whole build."""
    return [TrialState(f"t{i}") for i in range(n)]


def build_machine_per_trial(n: int) -> list[_Model]:
    """Naive: a Machine per trial, then the same first event."""
    models = []
    table = transition_table()
    for _ in range(n):
        model = _Model()
        TrialMachine(model=model, states=Status, initial=Status.NEW, transitions=table,
                     auto_transitions=False, send_event=True, model_attribute="status")
        model.add(event=TrialAdded(), policy=None)  # type: ignore[attr-defined]
        models.append(model)
    return models


def build_add_model(n: int) -> list[_Model]:
    """Naive: one Machine, every trial registered with ``add_model``."""
    machine = TrialMachine(model=None, states=Status, initial=Status.NEW,
                           transitions=transition_table(), auto_transitions=False,
                           send_event=True, model_attribute="status")
    models = []
    for _ in range(n):
        model = _Model()
        machine.add_model(model)
        model.add(event=TrialAdded(), policy=None)  # type: ignore[attr-defined]
        models.append(model)
    return models


BUILDERS: list[tuple[str, Callable[[int], list[Any]], bool]] = [
    ("shared Machine, plain TrialState (ours)", build_shared, False),
    ("ours, TrialState objects only (no event)", build_states_only, False),
    ("a Machine per trial (naive)", build_machine_per_trial, True),
    ("one Machine + add_model (naive)", build_add_model, True),
]


# ---------------------------------------------------------------- a history to fold

POLICY = RetryPolicy(max_failures=4, restore_retry_num=2, max_preemptions=6,
                     on_restore_exhausted=ExhaustionAction.PREVIOUS_CHECKPOINT)


def generate_history(trials: int, seed: int = 7) -> list[tuple[str, list[Event]]]:
    """Valid event histories for ``trials`` trials, as a Tune run would record them."""
    rng = random.Random(seed)
    histories = []
    for i in range(trials):
        trial_id = f"trial_{i:05d}"
        state = TrialState(trial_id)
        events: list[Event] = [PolicySet(POLICY), TrialAdded({"lr": rng.random()})]
        for event in events:
            apply(state, event)
        saved = 0
        while not state.status.is_terminal and len(events) < 60:
            status = state.status
            if status is Status.PENDING:
                event: Event = TrialStarted()
            elif status is Status.PAUSED:
                event = TrialResumed()
            elif status is Status.RESTORING:
                event = (RestoreSucceeded() if rng.random() < 0.6 else TrialFailed(
                    RestoreError("builtins.OSError", "checkpoint unreadable")))
            else:
                roll = rng.random()
                if roll < 0.45:
                    saved += 1
                    event = CheckpointSaved(f"checkpoint_{saved:06d}")
                elif roll < 0.55:
                    event = TrialPaused()
                elif roll < 0.65:
                    event = TrialFailed(TrainingError("builtins.ValueError", "nan loss"))
                elif roll < 0.75:
                    event = TrialFailed(ActorError("ray.exceptions.ActorDiedError", "died",
                                                   preempted=rng.random() < 0.5))
                elif roll < 0.97:
                    continue  # a result, not a state change
                else:
                    event = TrialCompleted()
            apply(state, event)
            events.append(event)
        histories.append((trial_id, events))
    return histories


# ---------------------------------------------------------------- the hand-written baseline


def _within(policy: RetryPolicy, failures: int) -> bool:
    return policy.max_failures < 0 or failures <= policy.max_failures


def _close_user_restore(s: TrialState) -> None:
    # The generated histories hold no failure of a user's own restore (restore_phase "ray",
    # no RestoreError while RUNNING): a start, a training failure or a reset ends what
    # RestoreSucceeded held aside, as the fold's close_user_restore does.
    s.unconfirmed_restore = None
    s.unconfirmed_restore_failures = 0
    s.user_restore_failed = False


def _b_record_error(s: TrialState, e: Any) -> None:
    # The bookkeeping every failure does (record_error): the last error, where and when it
    # happened, and how many failures in a row it repeats (give_up_on_repeats, off here).
    err, last = e.error, s.last_error
    same = (last is not None and s.last_failure_iteration == e.iteration
            and last.kind == err.kind and last.cause_type == err.cause_type
            and last.message == err.message)
    s.repeats = 0 if e.iteration is None else s.repeats + 1 if same else 1
    s.last_error = err
    s.last_failure_node = e.node
    s.last_failure_iteration = e.iteration


def _b_start(s: TrialState, e: Any, p: RetryPolicy) -> None:
    _close_user_restore(s)
    if e.restore_from is not None or s.checkpoints:
        s.restoring_from = e.restore_from or (s.checkpoints[-1] if s.checkpoints else None)
        s.status = Status.RESTORING
    else:
        s.status = Status.RUNNING


def _b_restored(s: TrialState, e: Any, p: RetryPolicy) -> None:
    s.unconfirmed_restore = s.restoring_from or (s.checkpoints[-1] if s.checkpoints else None)
    s.unconfirmed_restore_failures = s.restore_failures
    s.restore_failures = 0
    s.restoring_from = None
    s.status = Status.RUNNING


def _b_checkpoint(s: TrialState, e: Any, p: RetryPolicy) -> None:
    kept = tuple(c for c in s.checkpoints if c != e.checkpoint)
    s.checkpoints = (*kept, e.checkpoint)[-CHECKPOINT_HISTORY:]


def _to(status: Status) -> Callable[[TrialState, Any, RetryPolicy], None]:
    def handler(s: TrialState, e: Any, p: RetryPolicy) -> None:
        s.status = status
    return handler


def _b_set_policy(s: TrialState, e: Any, p: RetryPolicy) -> None:
    s.policy = e.policy


def _b_discard(s: TrialState, e: Any, p: RetryPolicy) -> None:
    gone = set(e.checkpoints)
    s.checkpoints = tuple(c for c in s.checkpoints if c not in gone)


def _b_reset(s: TrialState, e: Any, p: RetryPolicy) -> None:
    if e.from_scratch:
        s.checkpoints = ()
        s.failures = 0
        s.preemptions = 0
    s.restore_failures = 0
    s.restoring_from = None
    _close_user_restore(s)
    s.status = Status.PENDING


def _b_fail_restoring(s: TrialState, e: Any, p: RetryPolicy) -> None:
    err = e.error
    _b_record_error(s, e)
    if not err.retryable or p.is_fatal(err.cause_type):
        s.failures += 1
        s.last_decision, s.status = Decision.GIVE_UP, Status.ERROR
        return
    if s.restore_failures < p.restore_retry_num:
        s.restore_failures += 1
        s.total_restore_failures += 1
        if _within(p, s.failures):
            s.last_decision, s.status = Decision.RETRY_RESTORE, Status.PENDING
        else:
            s.last_decision, s.status = Decision.GIVE_UP, Status.ERROR
        return
    s.failures += 1
    s.total_restore_failures += 1
    if not _within(p, s.failures):
        s.last_decision, s.status = Decision.GIVE_UP, Status.ERROR
        return
    s.status = Status.PENDING
    action = p.on_restore_exhausted
    if action is ExhaustionAction.RETRY_CHECKPOINT:
        s.last_decision = Decision.RECOVER
        return
    current = s.restoring_from or (s.checkpoints[-1] if s.checkpoints else None)
    known = current in s.checkpoints
    older = s.checkpoints.index(current) > 0 if known else bool(s.checkpoints)
    if action is ExhaustionAction.PREVIOUS_CHECKPOINT and older:
        if known:
            s.checkpoints = s.checkpoints[: s.checkpoints.index(current)]
        s.last_decision = Decision.PREVIOUS_CHECKPOINT
    else:
        s.checkpoints = ()
        s.last_decision = Decision.RESTART_FROM_SCRATCH
    s.restore_failures = 0
    s.restoring_from = None


def _b_fail_active(s: TrialState, e: Any, p: RetryPolicy) -> None:
    _close_user_restore(s)
    err = e.error
    _b_record_error(s, e)
    if not err.retryable or p.is_fatal(err.cause_type):
        s.failures += 1
        s.last_decision, s.status = Decision.GIVE_UP, Status.ERROR
        return
    if isinstance(err, ActorError) and err.preempted and not p.count_preemption_as_failure:
        s.preemptions += 1
        limit = p.max_preemptions
        if (limit is None or s.preemptions <= limit) and _within(p, s.failures):
            s.last_decision, s.status = Decision.RECOVER_PREEMPTED, Status.PENDING
        else:
            s.last_decision, s.status = Decision.GIVE_UP, Status.ERROR
        return
    s.failures += 1
    if _within(p, s.failures):
        s.last_decision, s.status = Decision.RECOVER, Status.PENDING
    else:
        s.last_decision, s.status = Decision.GIVE_UP, Status.ERROR


_LIVE = (Status.PENDING, Status.RUNNING, Status.PAUSED, Status.RESTORING)
BASELINE: dict[tuple[str, Status], Callable[[TrialState, Any, RetryPolicy], None]] = {
    ("add", Status.NEW): _to(Status.PENDING),
    ("start", Status.PENDING): _b_start,
    ("restored", Status.RESTORING): _b_restored,
    **{("checkpoint", s): _b_checkpoint for s in (*_LIVE, Status.TERMINATED)},
    ("pause", Status.RUNNING): _to(Status.PAUSED),
    ("resume", Status.PAUSED): _to(Status.PENDING),
    ("complete", Status.RUNNING): _to(Status.TERMINATED),
    **{("stop", s): _to(Status.TERMINATED) for s in _LIVE},
    **{("reset", s): _b_reset for s in (Status.TERMINATED, Status.ERROR)},
    **{("discard_checkpoints", s): _b_discard for s in Status},
    **{("set_policy", s): _b_set_policy for s in Status},
    ("fail", Status.RESTORING): _b_fail_restoring,
    **{("fail", s): _b_fail_active for s in (Status.PENDING, Status.RUNNING, Status.PAUSED)},
}
# Every trigger the baseline knows is an event type the domain has.
assert {t for t, _ in BASELINE} == {c.trigger for c in (
    TrialAdded, TrialStarted, RestoreSucceeded, CheckpointSaved, TrialPaused, TrialResumed,
    TrialCompleted, TrialStopped, TrialReset, CheckpointsDiscarded, PolicySet, TrialFailed)}


def fold_baseline(trial_id: str, events: Iterable[Event]) -> TrialState:
    """Fold through the hand-written dict table."""
    state = TrialState(trial_id)
    table = BASELINE
    for event in events:
        handler = table.get((event.trigger, state.status))
        if handler is None:
            raise ValueError(f"invalid {event.type_name} in {state.status}")
        handler(state, event, state.policy)
        state.seq += 1
    return state


# ---------------------------------------------------------------- the run


def _fmt(us: tuple[float, float, float]) -> tuple[str, str]:
    median, low, high = us
    return f"{median:,.2f}", f"{low:,.2f} - {high:,.2f}"


@click.command()
@click.option("--rounds", default=7, show_default=True, help="Rounds per measurement.")
@click.option("--budget", default=15.0, show_default=True,
              help="Seconds one round of a naive build may be projected to take.")
@click.option("--trials", default=2_000, show_default=True, help="Trials in the fold history.")
def main(rounds: int, budget: float, trials: int) -> None:
    """Print the build-cost and fold-cost tables."""
    console = Console(width=130)
    console.print(f"Python {platform.python_version()}, transitions {transitions.__version__}, "
                  f"{platform.machine()}; medians of {rounds} rounds (min - max)")

    build = Table(title="Build cost per trial (us): create the trial and fold TrialAdded")
    for column in ("way", "trials", "us/trial", "min - max", "vs ours", "vs its 1k"):
        build.add_column(column, justify="left" if column == "way" else "right")
    # Our ways: every round builds SIZES[-1] trials in batches of n (each batch alive until
    # the next replaces it), rounds interleaved across sizes, so every size is measured over
    # the same work and the same stretch of machine load; only the live set differs.
    total = SIZES[-1]
    ours_times: dict[tuple[str, int], list[float]] = {}
    for r in range(rounds):
        for name, builder, naive in BUILDERS:
            if naive:
                continue
            for n in SIZES[r % len(SIZES):] + SIZES[: r % len(SIZES)]:
                def batches(builder: Callable[[int], list[Any]] = builder, n: int = n) -> None:
                    kept: list[Any] = []
                    for _ in range(total // n):
                        kept = builder(n)
                    del kept
                ours_times.setdefault((name, n), []).extend(
                    measure(batches, total, 1).rounds)
    ours: dict[int, float] = {}
    for name, builder, naive in BUILDERS:
        first: float | None = None
        last_per: float | None = None
        growth = 1.5  # per-trial cost growth to the next size, until two sizes are measured
        for n in SIZES:
            projected = (last_per or 0.0) * growth * n * 1e-6
            if naive and last_per is not None and projected > budget:
                build.add_row(name, f"{n:,}", "skipped", f"projected {projected:,.0f} s/round",
                              "", "")
                continue
            if naive:  # one batch of n per round, at most 3 rounds
                timing = measure(lambda builder=builder, n=n: builder(n), n,
                                 max(1, min(rounds, 3)))
            else:
                timing = Timing(ours_times[(name, n)], total)
            median, low, high = timing.per_unit_us()
            if builder is build_shared:
                ours[n] = median
            first = first or median
            build.add_row(name, f"{n:,}", f"{median:,.2f}", f"{low:,.2f} - {high:,.2f}",
                          f"{median / ours[n]:.1f}x", f"{median / first:.2f}x")
            if last_per is not None:
                growth = max(1.0, median / last_per)
            last_per = median
    console.print(build)
    linear = ours[SIZES[-1]] / ours[SIZES[0]]
    console.print(f"ours: per-trial cost at {SIZES[-1]:,} is {linear:.2f}x that at "
                  f"{SIZES[0]:,} (target: within 1.5x) -> {'OK' if linear <= 1.5 else 'NOT OK'}")

    histories = generate_history(trials)
    count = sum(len(events) for _, events in histories)
    for trial_id, events in histories:  # the baseline must do the same work
        expected = fold(trial_id, events)[0]
        assert fold_baseline(trial_id, events) == expected, trial_id
        assert fold_compiled(trial_id, events) == expected, trial_id

    def run_transitions() -> None:
        for trial_id, events in histories:
            fold(trial_id, events)

    def run_apply_compiled() -> None:
        for trial_id, events in histories:
            state = TrialState(trial_id)
            for event in events:
                apply_compiled(state, event)

    def run_fold_compiled() -> None:
        for trial_id, events in histories:
            fold_compiled(trial_id, events)

    def run_baseline() -> None:
        for trial_id, events in histories:
            fold_baseline(trial_id, events)

    paths = [
        ("plain dict table, hand-written (baseline)", run_baseline),
        ("transitions Machine: fold (records)", run_transitions),
        ("compiled table: apply_compiled (records)", run_apply_compiled),
        ("compiled table: fold_compiled (no records)", run_fold_compiled),
    ]
    fold_table = Table(title=f"Fold cost per event (us): {trials:,} trials, {count:,} events")
    for column in ("path", "us/event", "min - max", "vs baseline"):
        fold_table.add_column(column, justify="left" if column == "path" else "right")
    # Rounds are interleaved (each round runs every path, in a rotating order) so that a
    # load spike on a shared machine hits all paths alike rather than one.
    times: dict[str, list[float]] = {name: [] for name, _ in paths}
    for r in range(rounds):
        for name, work in paths[r % len(paths):] + paths[: r % len(paths)]:
            times[name] += measure(work, count, 1).rounds
    baseline = None
    for name, _ in paths:
        median, low, high = Timing(times[name], count).per_unit_us()
        baseline = baseline or median
        fold_table.add_row(name, f"{median:,.2f}", f"{low:,.2f} - {high:,.2f}",
                           f"{median / baseline:.1f}x")
    console.print(fold_table)

    # Replay decodes every stored event before folding it: its cost beside unchecked
    # construction (the payload splatted into the class, nested records rebuilt).
    stored = [encode_event(e) for _, events in histories for e in events]

    def run_decode() -> None:
        for type_name, version, payload in stored:
            decode_event(type_name, version, payload)

    def run_unchecked() -> None:
        for type_name, _, payload in stored:
            cls = EVENT_TYPES[type_name]
            if cls is TrialFailed:
                cls(error=TrialError.from_dict(payload["error"]))
            elif cls is PolicySet:
                cls(policy=RetryPolicy.from_dict(payload["policy"]))
            else:
                cls(**payload)

    decode_times: dict[str, list[float]] = {"unchecked": [], "checked": []}
    for _ in range(rounds):
        decode_times["unchecked"] += measure(run_unchecked, len(stored), 1).rounds
        decode_times["checked"] += measure(run_decode, len(stored), 1).rounds
    decode_table = Table(title=f"Decode cost per stored event (us): {len(stored):,} events")
    for column in ("path", "us/event", "min - max", "vs baseline"):
        decode_table.add_column(column, justify="left" if column == "path" else "right")
    unchecked = Timing(decode_times["unchecked"], len(stored)).per_unit_us()
    checked = Timing(decode_times["checked"], len(stored)).per_unit_us()
    decode_table.add_row("cls(**payload), no checks (baseline)", *_fmt(unchecked), "1.0x")
    decode_table.add_row("decode_event (registry, version, typed fields)", *_fmt(checked),
                         f"{checked[0] / unchecked[0]:.1f}x")
    console.print(decode_table)


# ---------------------------------------------------------------- in the harness


def run(ctx: Context) -> None:
    """Section ``fold`` of ``python -m benchmarks``: fold and decode cost per event."""
    trials = ctx.size(2_000, 200)
    histories = generate_history(trials)
    count = sum(len(events) for _, events in histories)
    for trial_id, events in histories:  # every path must do the same work
        expected = fold(trial_id, events)[0]
        assert fold_baseline(trial_id, events) == expected, trial_id
        assert fold_compiled(trial_id, events) == expected, trial_id

    def each(step: Callable[[str, list[Event]], Any]) -> Callable[[], None]:
        return lambda: [step(trial_id, events) for trial_id, events in histories] and None

    def apply_all(trial_id: str, events: list[Event]) -> None:
        state = TrialState(trial_id)
        for event in events:
            apply_compiled(state, event)

    times = interleaved({
        "baseline": each(fold_baseline),
        "transitions": each(fold),
        "apply_compiled": each(apply_all),
        "fold_compiled": each(fold_compiled),
    }, ctx.rounds)
    stats = {name: per_unit(t, count) for name, t in times.items()}
    table = ctx.report.table(
        "fold", f"Fold cost per event: {trials:,} generated trials, {count:,} valid events",
        "us/event")
    base = stats["baseline"]
    table.add("plain dict table, hand-written, same guards (baseline)", base)
    table.add("transitions Machine: fold (the definition; verify)", stats["transitions"],
              versus=base)
    table.add("compiled from the Machine: apply_compiled (records)", stats["apply_compiled"],
              versus=base)
    table.add("compiled from the Machine: fold_compiled (bulk replay)", stats["fold_compiled"],
              versus=base)

    stored = [encode_event(e) for _, events in histories for e in events]

    def decode_checked() -> None:
        for type_name, version, payload in stored:
            decode_event(type_name, version, payload)

    def decode_unchecked() -> None:
        for type_name, _, payload in stored:
            construct_unchecked(type_name, payload)

    decode = interleaved({"unchecked": decode_unchecked, "checked": decode_checked}, ctx.rounds)
    unchecked = per_unit(decode["unchecked"], len(stored))
    table.add("decode a stored payload: cls(**payload), no checks (baseline)", unchecked)
    table.add("decode a stored payload: decode_event (version, typed fields)",
              per_unit(decode["checked"], len(stored)), versus=unchecked)
    table.note("Before timing, the dict table and fold_compiled are checked to reach the very "
               "same final state as the transitions fold on every trial.")
    ctx.report.print_table(table)


def construct_unchecked(type_name: str, payload: dict[str, Any]) -> Event:
    """An event from its stored payload without any check (the limit for decoding)."""
    cls = EVENT_TYPES[type_name]
    if cls is TrialFailed:
        return cls(error=TrialError.from_dict(payload["error"]))
    if cls is PolicySet:
        return cls(policy=RetryPolicy.from_dict(payload["policy"]))
    return cls(**payload)


if __name__ == "__main__":
    main()
