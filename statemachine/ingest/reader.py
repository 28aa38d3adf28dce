"""Read a Ray Tune experiment folder into a :class:`~statemachine.ingest.model.RayExperiment`.

Reads only, and never unpickles: ``tuner.pkl``, the searcher state
(``basic-variant-state-*.json`` despite its name, ``searcher-state-*.pkl``), ``params.pkl``
and ``error.pkl`` run code when loaded, so they are listed as not read. Every snapshot
``experiment_state-*.json`` is read (each driver wrote its own); one that does not parse (Ray
rewrites them in place, so a copy taken mid-write is cut short) is skipped with a warning.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from statemachine.exceptions import NotARayExperimentError
from statemachine.ingest.files import Entry, ExperimentFolder
from statemachine.ingest.model import (
    CheckpointDir,
    RayExperiment,
    ResultRow,
    StateFile,
    TrialFiles,
)
from statemachine.ingest.ray_files import (
    parse_error_file,
    parse_params,
    parse_progress_csv,
    parse_result_lines,
    parse_state_file,
    state_stamp,
    utc_offset,
)
from statemachine.log_location import DEFAULT_LOG_FILENAME

__all__ = ["read_experiment"]

Warn = Callable[[str], None]

_CHECKPOINT = re.compile(r"^checkpoint_(\d+)$")
#: A trial folder's default name: ``<trainable>_<trial id>_<index>_<tag>_<time>``.
_FOLDER_ID = re.compile(r"^.+?_(?P<id>[0-9a-f]{5}_\d{5})(?:_|$)")
_PICKLES = re.compile(r"^(tuner\.pkl|basic-variant-state-.*\.json|searcher-state-.*\.pkl|"
                      r".*\.pkl)$")
_TRIAL_FILES = frozenset({"params.json", "result.json", "progress.csv", "error.txt"})


def read_experiment(folder: ExperimentFolder, warn: Warn) -> RayExperiment:
    """Everything Ray left in ``folder`` that an ingest reads.

    Raises :class:`NotARayExperimentError` when the folder holds neither an experiment state
    nor a trial folder (naming the experiments below it when it is a results folder).
    """
    tree = folder.tree()
    top = tree.get("", [])
    names = {entry.name for entry in top if not entry.is_dir}
    states, skipped = _states(folder, sorted(n for n in names if state_stamp(n)), warn)
    by_folder: dict[str, str] = {}
    for state in states:
        for saved in state.trials.values():
            if saved.relative_logdir:
                by_folder[saved.relative_logdir] = saved.trial_id
    trials: dict[str, TrialFiles] = {}
    not_read = sorted(n for n in names if _PICKLES.match(n))
    for entry in sorted((e for e in top if e.is_dir), key=lambda e: e.name):
        entries = tree.get(entry.name, [])
        files = {e.name for e in entries if not e.is_dir}
        if entry.name not in by_folder and not files & _TRIAL_FILES:
            continue
        trial = _trial(folder, entry.name, entries, by_folder.get(entry.name), warn)
        if trial is None:
            continue
        if trial.trial_id in trials:
            warn(f"{folder.label}/{entry.name}: trial {trial.trial_id} has another folder "
                 f"({trials[trial.trial_id].folder}); this one is left out")
            continue
        trials[trial.trial_id] = trial
        not_read.extend(f"{entry.name}/{n}" for n in sorted(files) if n.endswith(".pkl"))
    if not states and not skipped and not trials:
        raise NotARayExperimentError(_not_an_experiment(folder, tree))
    ordered = dict(sorted(trials.items()))  # Ray's ids number trials as it made them
    return RayExperiment(
        label=folder.label,
        name=folder.name,
        location=folder.label,
        state_files=tuple(states),
        skipped=tuple(skipped),
        trials=ordered,
        not_read=tuple(not_read),
        callback_log=DEFAULT_LOG_FILENAME in names,
        utc_offset=_offset(states, ordered.values()),
    )


def _states(folder: ExperimentFolder, names: list[str], warn: Warn
            ) -> tuple[list[StateFile], list[tuple[str, str]]]:
    states: list[StateFile] = []
    skipped: list[tuple[str, str]] = []
    for name in names:
        data = folder.read(name)
        try:
            if data is None:
                raise ValueError("it disappeared while being read")
            states.append(parse_state_file(name, data))
        except ValueError as exc:
            skipped.append((name, str(exc)))
            warn(f"{folder.label}/{name} skipped: {exc}")
    return states, skipped


def _trial(folder: ExperimentFolder, name: str, entries: list[Entry], known_id: str | None,
           warn: Warn) -> TrialFiles | None:
    notes: list[str] = []
    files = {e.name for e in entries if not e.is_dir}

    def read(file: str) -> bytes | None:
        return folder.read(f"{name}/{file}") if file in files else None

    params = None
    raw = read("params.json")
    if raw is not None:
        try:
            params = parse_params(raw)
        except ValueError as exc:
            notes.append(f"params.json not read: {exc}")
    rows: list[ResultRow] = []
    raw = read("result.json")
    if raw is not None:
        rows, broken, duplicates = parse_result_lines(raw)
        if broken:
            notes.append(f"result.json: {broken} line(s) not complete JSON, skipped")
        if duplicates:
            notes.append(f"result.json: {duplicates} duplicated line(s) dropped")
    else:
        raw = read("progress.csv")
        if raw is not None:
            try:
                rows = parse_progress_csv(raw)
            except ValueError as exc:
                notes.append(f"progress.csv not read: {exc}")
    raw = read("error.txt")
    failures = parse_error_file(raw) if raw is not None else []
    checkpoints = sorted(
        (CheckpointDir(e.name, int(m.group(1)), folder.path(f"{name}/{e.name}"), e.mtime)
         for e in entries if e.is_dir and (m := _CHECKPOINT.match(e.name))),
        key=lambda c: c.index,
    )
    trial_id = known_id or next((r.trial_id for r in rows if r.trial_id), None)
    if trial_id is None:
        match = _FOLDER_ID.match(name)
        trial_id = match.group("id") if match else None
    if trial_id is None:
        warn(f"{folder.label}/{name}: no trial id in its files or its name; left out")
        return None
    for note in notes:
        warn(f"{folder.label}/{name}: {note}")
    return TrialFiles(name, folder.path(name), trial_id, params, tuple(rows), tuple(failures),
                      tuple(checkpoints), "error.pkl" in files, tuple(notes))


def _offset(states: list[StateFile], trials: Iterable[TrialFiles]) -> float | None:
    """The driver's local time ahead of UTC: from a snapshot, else from a result row."""
    for state in reversed(states):
        if state.utc_offset is not None:
            return state.utc_offset
    for trial in trials:
        for row in trial.rows:
            if row.date and row.timestamp is not None:
                found = utc_offset(row.date, row.timestamp)
                if found is not None:
                    return found
    return None


def _not_an_experiment(folder: ExperimentFolder, tree: dict[str, list[Entry]]) -> str:
    below = sorted(sub for sub, entries in tree.items()
                   if sub and any(state_stamp(e.name) for e in entries))
    if below:
        shown = ", ".join(below[:5]) + (", ..." if len(below) > 5 else "")
        return (f"{folder.label} is not a Ray Tune experiment folder but holds {len(below)}: "
                f"{shown}; ingest one of them (trial-replay ingest {folder.label}/{below[0]})")
    return (f"{folder.label} is not a Ray Tune experiment folder: it has no "
            "experiment_state-*.json and no trial folder (params.json, result.json); give "
            "the folder Ray Tune wrote, e.g. ~/ray_results/my_exp")
