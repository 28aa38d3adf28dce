"""One trial's history as Ray's files tell it: attempts, checkpoints and failures, in order.

Ray keeps no history of a trial's attempts; this module infers it (pure, no I/O):

- **attempts** from ``result.json``: a new attempt begins where ``iterations_since_restore``
  starts again, or where the process (``pid``, ``node_ip``) changes;
- **failures** from ``error.txt``, each placed after the attempt it ended: the attempt whose
  process the error names (``ray::Flaky.train() (pid=9633, ip=...)``; an actor death's
  ``pid:``), else by time (``occurred at``, whole seconds, the driver's local time): after
  the attempts that began before it, before those that began after it. A failure of a
  process that never reported (a restore that failed, a first step that raised) sits
  between the attempts around it;
- **checkpoints** after the result that saved them: a function trainable's result names its
  checkpoint (``checkpoint_dir_name``); a class trainable's iteration is read from Ray's
  checkpoint manager (:mod:`statemachine.ingest.pickle_scan`), else the folder's time.

Every item has a ``key`` taken from its source (a result's iteration, time and process; a
failure's place in ``error.txt``, number and time; a checkpoint's name): the same folder
gives the same keys, and a folder that grew gives the same keys for what it already held.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timezone

from statemachine.ingest.model import FailureBlock, KnownCheckpoint, ResultRow, TrialFiles
from statemachine.ingest.ray_files import parse_stamp

__all__ = ["Attempt", "Item", "TrialTimeline", "failure_time", "trial_timeline"]


@dataclass(frozen=True)
class Attempt:
    """One run of the trial's process that reported results (its rows, in order)."""

    rows: tuple[ResultRow, ...]

    @property
    def first(self) -> ResultRow:
        """The attempt's first result."""
        return self.rows[0]

    @property
    def key(self) -> str:
        """Where it comes from: its first result's iteration, time and process."""
        first = self.first
        stamp = int(first.timestamp) if first.timestamp is not None else None
        return f"attempt@{first.iteration}:{stamp}:{first.pid}"

    @property
    def started_at(self) -> float | None:
        """When the attempt began: its first result's time less its time since restore."""
        first = self.first
        if first.timestamp is None:
            return None
        return first.timestamp - min(first.time_since_restore or 0.0, 3600.0)

    @property
    def restored_iteration(self) -> int | None:
        """The iteration it continued from (0: from scratch; ``None``: not known)."""
        first = self.first
        if first.iteration is None or first.since_restore is None:
            return None
        return max(first.iteration - first.since_restore, 0)


@dataclass(frozen=True)
class Item:
    """One thing that happened to the trial, in the order inferred.

    ``kind``: ``added``, ``start`` (an attempt began), ``first`` (its first result),
    ``checkpoint`` or ``failure``. ``time``: seconds since the epoch (``None``: not known).
    ``ends_attempt``: a failure of the attempt that reported before it (not of a process
    started after it).
    """

    kind: str
    key: str
    time: float | None
    attempt: Attempt | None = None
    checkpoint: str | None = None
    failure: FailureBlock | None = None
    ends_attempt: bool = False


@dataclass(frozen=True)
class TrialTimeline:
    """A trial's items in order, and what its checkpoints saved (name -> iteration)."""

    trial_id: str
    items: tuple[Item, ...]
    checkpoint_iterations: Mapping[str, int]
    checkpoint_paths: Mapping[str, str]


def failure_time(occurred_at: str, utc_offset: float | None) -> float | None:
    """A header's local time as seconds since the epoch (``utc_offset`` unknown: this
    machine's time zone is assumed)."""
    try:
        local = parse_stamp(occurred_at)
    except ValueError:
        return None
    if utc_offset is None:
        return local.timestamp()
    return local.replace(tzinfo=timezone.utc).timestamp() - utc_offset


def _new_attempt(previous: ResultRow, row: ResultRow) -> bool:
    if row.since_restore is not None and previous.since_restore is not None:
        if row.since_restore <= previous.since_restore:
            return True
    elif row.iteration is not None and previous.iteration is not None:
        if row.iteration <= previous.iteration:
            return True
    if row.pid is not None and previous.pid is not None:
        return (row.pid, row.node_ip) != (previous.pid, previous.node_ip)
    return False


def split_attempts(rows: tuple[ResultRow, ...]) -> list[Attempt]:
    """The trial's rows cut into attempts (see the module's rules)."""
    attempts: list[list[ResultRow]] = []
    for row in rows:
        if not attempts or _new_attempt(attempts[-1][-1], row):
            attempts.append([])
        attempts[-1].append(row)
    return [Attempt(tuple(rows)) for rows in attempts]


def _gaps(attempts: list[Attempt], failures: tuple[FailureBlock, ...],
          offset: float | None) -> list[tuple[int, bool]]:
    """Per failure: the attempt it comes after (0: before the first) and whether it ended
    that attempt (its process is the attempt's)."""
    firsts = [a.first.timestamp for a in attempts]
    lasts = [a.rows[-1].timestamp for a in attempts]
    found: list[tuple[int, bool]] = []
    previous = 0
    claimed: set[int] = set()
    for block in failures:
        match = next(
            (j for j, a in enumerate(attempts, 1)
             if j >= previous and j not in claimed and block.pid is not None
             and a.first.pid == block.pid
             and (block.node_ip is None or a.first.node_ip in (None, block.node_ip))),
            None,
        )
        if match is not None:
            claimed.add(match)
            previous = match
            found.append((match, True))
            continue
        moment = failure_time(block.occurred_at, offset)
        gap = previous
        if moment is not None:
            for g in range(previous, len(attempts) + 1):
                last = lasts[g - 1] if g > 0 else None
                first = firsts[g] if g < len(attempts) else None
                after_last = last is None or moment >= last
                before_next = first is None or moment <= first
                if after_last and before_next:
                    gap = g
                    break
            else:
                started = [t for t in firsts if t is not None]
                gap = max(previous, bisect.bisect_left(started, moment))
        previous = gap
        ends = gap >= 1 and gap not in claimed and block.call != "restore"
        if ends:
            claimed.add(gap)
        found.append((gap, ends))
    return found


def _checkpoint_places(trial: TrialFiles, attempts: list[Attempt],
                       known: Mapping[str, KnownCheckpoint]
                       ) -> tuple[dict[tuple[int, int], list[str]], dict[str, int]]:
    """Where each checkpoint goes: ``{(attempt, row): [names]}``, and name -> iteration."""
    rows = [(j, i, row) for j, a in enumerate(attempts) for i, row in enumerate(a.rows)]
    iterations: dict[str, int] = {}
    place: dict[str, tuple[int, int]] = {}
    for j, i, row in rows:
        name = row.checkpoint_dir_name
        if name and name not in place:
            place[name] = (j, i)
            if row.iteration is not None:
                iterations[name] = row.iteration
    for folder in trial.checkpoints:
        if folder.name in place or not rows:
            continue
        hint = known.get(folder.name)
        spot = None
        if hint is not None and hint.iteration is not None:
            iterations[folder.name] = hint.iteration
            same = [(j, i, r) for j, i, r in rows if r.iteration == hint.iteration]
            exact = [s for s in same if hint.timestamp is not None
                     and s[2].timestamp == hint.timestamp]
            chosen = exact or same
            spot = (chosen[0][0], chosen[0][1]) if chosen else None
        if spot is None and folder.mtime is not None:
            before = [(j, i) for j, i, r in rows
                      if r.timestamp is not None and r.timestamp <= folder.mtime]
            spot = before[-1] if before else (rows[0][0], rows[0][1])
        place[folder.name] = spot if spot is not None else (rows[-1][0], rows[-1][1])
    # Ray numbers checkpoints in the order it saves them: never place one before a lower one.
    placed: dict[tuple[int, int], list[str]] = {}
    lowest = (0, 0)
    for name in sorted(place, key=_index):
        spot = max(place[name], lowest)
        lowest = spot
        placed.setdefault(spot, []).append(name)
    return placed, iterations


def _index(name: str) -> tuple[int, str]:
    digits = name.rsplit("_", 1)[-1]
    return (int(digits) if digits.isdigit() else -1, name)


def trial_timeline(trial: TrialFiles, known: Mapping[str, KnownCheckpoint],
                   utc_offset: float | None) -> TrialTimeline:
    """The trial's items in order (see the module's rules).

    ``known``: the checkpoints Ray's checkpoint managers tracked for this trial (any
    snapshot), by name; ``utc_offset``: how far the driver's local time is ahead of UTC.
    """
    attempts = split_attempts(trial.rows)
    gaps = _gaps(attempts, trial.failures, utc_offset)
    places, iterations = _checkpoint_places(trial, attempts, known)
    paths = {c.name: c.path for c in trial.checkpoints}
    for names in places.values():
        for name in names:
            paths.setdefault(name, f"{trial.path}/{name}")
    by_gap: dict[int, list[tuple[FailureBlock, bool]]] = {}
    for block, (gap, ends) in zip(trial.failures, gaps, strict=True):
        by_gap.setdefault(gap, []).append((block, ends))

    items: list[Item] = [Item("added", "added", None)]

    def failures_after(gap: int) -> None:
        for block, ends in by_gap.get(gap, []):
            key = f"failure@{block.ordinal}:{block.number}:{block.occurred_at}"
            items.append(Item("failure", key, failure_time(block.occurred_at, utc_offset),
                              failure=block, ends_attempt=ends))

    failures_after(0)
    for j, attempt in enumerate(attempts):
        items.append(Item("start", attempt.key, attempt.started_at, attempt=attempt))
        items.append(Item("first", attempt.key, attempt.first.timestamp, attempt=attempt))
        for i, row in enumerate(attempt.rows):
            for name in places.get((j, i), []):
                items.append(Item("checkpoint", f"checkpoint@{name}", row.timestamp,
                                  attempt=attempt, checkpoint=name))
        failures_after(j + 1)
    times = [item.time for item in items if item.time is not None]
    if times:
        items[0] = Item("added", "added", min(times))
    return TrialTimeline(trial.trial_id, tuple(items), iterations, paths)
