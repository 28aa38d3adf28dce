"""What an ingest reads from a Ray experiment folder, as plain values (no Ray objects).

:mod:`statemachine.ingest.ray_files` parses each of Ray's files into these;
:mod:`statemachine.ingest.reader` gathers them for a folder; the reconstruction
(:mod:`statemachine.ingest.timeline`, :mod:`statemachine.ingest.reconstruct`) reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple


class ResultRow(NamedTuple):
    """One line of a trial's ``result.json`` (the fields an ingest reads; ``None``: absent
    or not of the type Ray writes).

    ``line`` is its 1-based line number; ``timestamp`` is Ray's ``timestamp`` (whole seconds
    since the epoch, from the trial's process). A named tuple: one is made per result.
    """

    line: int
    iteration: int | None
    since_restore: int | None
    timestamp: float | None
    pid: int | None
    node_ip: str | None
    hostname: str | None
    done: bool
    checkpoint_dir_name: str | None
    time_since_restore: float | None
    trial_id: str | None
    date: str | None


@dataclass(frozen=True)
class FailureBlock:
    """One failure of ``error.txt``: ``Failure # <number> (occurred at <occurred_at>)`` and
    the error text after it (colour codes removed).

    ``ordinal``: its 1-based place in the file (Ray only appends, so it stays). ``pid`` and
    ``node_ip``: the process and node named by the text (``ray::Flaky.train() (pid=...,
    ip=...)`` or an actor death's ``pid:``/``ip:`` lines). ``call``: the actor method Ray
    named (``train``, ``restore``; ``None``: not named). ``rewritten``: the header is one
    the ``EventLogCallback`` wrote over Ray's.
    """

    ordinal: int
    number: int
    occurred_at: str
    text: str
    pid: int | None = None
    node_ip: str | None = None
    call: str | None = None
    rewritten: bool = False


@dataclass(frozen=True)
class CheckpointDir:
    """A ``checkpoint_<index>`` folder of a trial (``mtime``: as the filesystem says)."""

    name: str
    index: int
    path: str
    mtime: float | None = None


@dataclass(frozen=True)
class KnownCheckpoint:
    """A checkpoint Ray's checkpoint manager tracked: the iteration (and time) it saved."""

    name: str
    iteration: int | None
    timestamp: float | None


@dataclass(frozen=True)
class StateTrial:
    """One trial as an ``experiment_state-*.json`` snapshot saved it."""

    trial_id: str
    status: str
    relative_logdir: str | None
    config: dict[str, Any]
    max_failures: int
    ray_failures: int
    """Ray's ``num_failures`` in that snapshot."""
    error_filename: str | None
    last_result_time: float | None
    trainable_name: str | None
    checkpoints: tuple[KnownCheckpoint, ...] = ()


@dataclass(frozen=True)
class StateFile:
    """One ``experiment_state-<time>.json``: a snapshot of every trial, by one driver.

    ``stamp`` is the time in its name (the driver's session start, local time);
    ``utc_offset`` the seconds that local time is ahead of UTC, when the file tells
    (``runner_data._session_str`` beside ``stats.start_time``).
    """

    name: str
    stamp: str
    trials: dict[str, StateTrial]
    start_time: float | None = None
    utc_offset: float | None = None


@dataclass(frozen=True)
class TrialFiles:
    """What a trial's folder holds (``folder``: its name; ``path``: as Ray names it)."""

    folder: str
    path: str
    trial_id: str
    params: dict[str, Any] | None
    rows: tuple[ResultRow, ...]
    failures: tuple[FailureBlock, ...]
    checkpoints: tuple[CheckpointDir, ...]
    error_pickle: bool = False
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class RayExperiment:
    """Everything an ingest read from one experiment folder.

    ``state_files``: the readable snapshots, oldest first (by name, as Ray orders them);
    ``skipped``: ``(file, why)`` for those that could not be read (half-written ones);
    ``trials``: by trial id, sorted; ``not_read``: files an ingest never opens
    (pickles: reading them would run code); ``callback_log``: the folder holds the
    ``EventLogCallback``'s own log (``statemachine.db``).
    """

    label: str
    name: str
    location: str
    state_files: tuple[StateFile, ...]
    skipped: tuple[tuple[str, str], ...]
    trials: dict[str, TrialFiles]
    not_read: tuple[str, ...] = ()
    callback_log: bool = False
    utc_offset: float | None = None

    @property
    def newest_state(self) -> StateFile | None:
        """The snapshot Ray itself would restore from (the newest by name)."""
        return self.state_files[-1] if self.state_files else None

    def trial_ids(self) -> list[str]:
        """Every trial id, from the folders and the snapshots, sorted (Ray's ids number
        trials in the order it made them)."""
        ids = set(self.trials)
        for state in self.state_files:
            ids.update(state.trials)
        return sorted(ids)
