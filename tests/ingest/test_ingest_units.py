"""The ingest's parts on small inputs: pickles never loaded, Ray's text formats, the order of
a trial's attempts and failures, event ids derived from the source."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import pytest

from statemachine.ingest.model import FailureBlock, KnownCheckpoint, ResultRow, TrialFiles
from statemachine.ingest.pickle_scan import checkpoints_in_manager
from statemachine.ingest.ray_files import parse_error_file, parse_state_file, utc_offset
from statemachine.ingest.reconstruct import event_id
from statemachine.ingest.timeline import failure_time, trial_timeline
from tests.ingest.conftest import VERSIONS, ingest_json, ray_folder


class Touch:
    """Loading a pickle of this creates ``path``: what a hostile pickle would do."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mknod, (str(self.path),))


def test_the_checkpoint_manager_is_read_without_loading_it(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    hook = Touch(marker)
    results = [
        {"checkpoint": {"path": f"/exp/trial/checkpoint_00000{i}"},
         "metrics": {"score": i, "training_iteration": 2 * (i + 1), "timestamp": 100 + i,
                     "config": {"timestamp": -1}},
         "hook": hook}
        for i in range(3)
    ]
    blob = pickle.dumps({"_checkpoint_results": results, "_latest": results[-1]})
    assert checkpoints_in_manager(blob) == [
        KnownCheckpoint(f"checkpoint_00000{i}", 2 * (i + 1), 100.0 + i) for i in range(3)]
    assert not marker.exists()
    pickle.loads(blob)  # the same bytes, loaded: they run code
    assert marker.exists()


def test_a_broken_pickle_gives_what_it_holds_before_the_break() -> None:
    blob = pickle.dumps([{"path": "a/checkpoint_000001", "training_iteration": 3}])
    assert checkpoints_in_manager(blob[: len(blob) - 3]) == [
        KnownCheckpoint("checkpoint_000001", 3, None)]
    assert checkpoints_in_manager(b"not a pickle") == []


def test_ingest_never_loads_a_pickle(tmp_path: Path) -> None:
    folder = ray_folder(VERSIONS[-1], "faults", tmp_path / "faults")
    marker = tmp_path / "ran"
    hostile = pickle.dumps(Touch(marker))
    (folder / "tuner.pkl").write_bytes(hostile)
    (folder / "basic-variant-state-2026-01-01_00-00-00.json").write_bytes(hostile)
    for trial in folder.glob("*/params.json"):
        (trial.parent / "error.pkl").write_bytes(hostile)
        (trial.parent / "params.pkl").write_bytes(hostile)
    report = ingest_json(folder, "--db", tmp_path / "log.db")
    assert not marker.exists()
    assert "tuner.pkl" in report["not_read"]
    assert "basic-variant-state-2026-01-01_00-00-00.json" in report["not_read"]
    assert sum(n.endswith("/error.pkl") for n in report["not_read"]) == len(report["trials"])


def test_error_file_blocks() -> None:
    text = (
        "a line Ray never writes before a header\n"
        "Failure # 0 (occurred at 2026-12-02_05-16-39)\n"
        "\x1b[36mray::Flaky.restore()\x1b[39m (pid=10072, ip=10.0.0.7, actor_id=d9)\n"
        "OSError: restore 1 failed\n"
        "Failure # 1 (occurred at 2026-12-02_05-16-42)\n"
        "The actor died unexpectedly before finishing this task.\n"
        "\tclass_name: ImplicitFunc\n\tpid: 12760\n\tip: 10.0.0.8\n"
        "Failure # 2 (occurred at 2026-12-02_05-16-43) [TrainingError; decision RECOVER]\n"
        "ValueError: x\n"
    )
    blocks = parse_error_file(text.encode())
    assert [(b.ordinal, b.number, b.occurred_at, b.pid, b.node_ip, b.call, b.rewritten)
            for b in blocks] == [
        (1, 0, "2026-12-02_05-16-39", 10072, "10.0.0.7", "restore", False),
        (2, 1, "2026-12-02_05-16-42", 12760, "10.0.0.8", None, False),
        (3, 2, "2026-12-02_05-16-43", None, None, None, True),  # the callback's header
    ]
    assert blocks[0].text.startswith("ray::Flaky.restore() (pid=10072")


def test_a_state_file_tells_the_drivers_time_zone() -> None:
    # Ray names the session in the driver's local time, and saves its start in UTC seconds.
    document = ('{"trial_data": [], "runner_data": {"_session_str": "2026-12-02_07-16-21"}, '
                '"stats": {"start_time": 1796188581.6}}')
    state = parse_state_file("experiment_state-2026-12-02_07-16-21.json", document.encode())
    assert state.utc_offset == 7200.0
    assert utc_offset("2026-12-02_05-16-21", 1796188581.6) == 0.0
    assert failure_time("2026-12-02_07-16-26", 7200.0) == 1796188586.0
    with pytest.raises(ValueError, match="not complete JSON"):
        parse_state_file("experiment_state-2026-12-02_07-16-21.json", document[:30].encode())


def _row(line: int, iteration: int, since: int, pid: int, at: float) -> ResultRow:
    return ResultRow(line, iteration, since, at, pid, "10.0.0.7", "vm", False, None, 0.1,
                     "t", None)


def test_a_failure_in_the_same_second_goes_after_the_attempt_of_its_process() -> None:
    """Times are whole seconds: the process named by the error decides."""
    rows = (_row(1, 1, 1, 11, 100), _row(2, 2, 2, 11, 100),  # attempt 1, pid 11
            _row(3, 1, 1, 12, 100), _row(4, 2, 2, 12, 100))  # attempt 2, pid 12 (from 0)
    failure = FailureBlock(1, 1, "1970-01-01_00-01-40", "ray::T.train() ...", 11, "10.0.0.7",
                           "train")
    restore = FailureBlock(2, 1, "1970-01-01_00-01-40", "ray::T.restore() ...", 13,
                           "10.0.0.7", "restore")
    trial = TrialFiles("T_t", "/exp/T_t", "t", {}, rows, (failure, restore), ())
    items = trial_timeline(trial, {}, 0.0).items
    assert [(i.kind, i.failure.pid if i.failure else None) for i in items] == [
        ("added", None), ("start", None), ("first", None), ("failure", 11),
        ("failure", 13), ("start", None), ("first", None)]
    assert items[3].ends_attempt and not items[4].ends_attempt


def test_event_ids_come_from_the_source() -> None:
    first = event_id("a1_00000", "failure@1:1:2026-12-02_05-16-39")
    assert first == event_id("a1_00000", "failure@1:1:2026-12-02_05-16-39")
    assert first != event_id("a1_00001", "failure@1:1:2026-12-02_05-16-39")
    assert first.startswith("ray-") and len(first) == 44


def test_ingest_runs_without_ray_or_pyarrow(tmp_path: Path) -> None:
    """On a laptop with neither installed: the reader, the reconstruction and the writer."""
    import subprocess
    import sys

    folder = ray_folder(VERSIONS[-1], "faults", tmp_path / "faults")
    code = (
        "import sys\n"
        "sys.modules['ray'] = None\n"
        "sys.modules['pyarrow'] = None\n"
        "from statemachine.cli.app import main\n"
        f"code = main(['ingest', {str(folder)!r}, '--db', {str(tmp_path / 'log.db')!r}])\n"
        "assert not any(m.startswith(('ray.', 'pyarrow.')) for m in sys.modules), 'imported'\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2], timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Ingested" in done.stdout
