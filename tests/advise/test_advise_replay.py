"""The replay part of the sweep agrees with ``what-if`` on every policy of the sweep: the
same status and the same cut wherever no simulation was needed, and a simulation exactly
where what-if says the trial would have gone on past the end of its record."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.advise_model import FailureModel, generate
from statemachine import EventStore
from statemachine.advise import Grid, advise
from statemachine.advise.history import TrialHistory, history
from statemachine.advise.reader import read_histories
from statemachine.cli.whatif import what_if
from statemachine.domain.policy import ExhaustionAction, RestorePhase

GRID = Grid(restore_retry_num=(0, 1, 3), max_failures=(0, 1, 2),
            on_restore_exhausted=tuple(ExhaustionAction), avoid_failed_nodes=(False, True),
            max_preemptions=(None, 0, 2), restore_phase=tuple(RestorePhase))
FIXTURE = Path(__file__).resolve().parent.parent / "data" / "fixture.db"


def _check(histories: list[TrialHistory]) -> int:
    advice = advise(histories, GRID, samples=4, seed=1, keep_trials=True)
    by_id = {(h.experiment, h.trial_id): h for h in histories}
    compared = 0
    for result in advice.results:
        assert len(result.trials) == sum(1 for h in histories if h.failures)
        for row in result.trials:
            h = by_id[(row.experiment, row.trial_id)]
            told = what_if(h.trial_id, h.events, result.changes)
            if row.hypothetical == "simulated":
                assert told.cut_at_seq is None
                assert told.recorded["status"] == "ERROR"
                assert told.hypothetical["status"] in ("PENDING", "RUNNING", "RESTORING")
                continue
            compared += 1
            assert row.hypothetical == told.hypothetical["status"], (result.changes, row)
            assert row.cut_at == told.cut_at_seq
    return compared


def test_the_sweep_replays_as_what_if_does_on_a_synthetic_run() -> None:
    """432 policies (every swept field varied) over a run with restore failures,
    preemptions and a deterministic trial."""
    model = FailureModel(trials=30, bad_node_p=0.2)
    histories = [history("exp", t.trial_id, t.events, t.times) for t in generate(model, 7)]
    assert _check(histories) > 1000


@pytest.mark.skipif(not FIXTURE.exists(), reason="the committed fixture log is missing")
def test_the_sweep_replays_as_what_if_does_on_the_recorded_fixture(tmp_path: Path) -> None:
    """The same on the log a real Ray Tune run recorded (tests/data/fixture.db)."""
    import shutil

    copy = tmp_path / "fixture.db"
    shutil.copy(FIXTURE, copy)
    store = EventStore.open(f"sqlite:///{copy}")
    try:
        names = [info.name for info in store.list_experiments()]
        read = read_histories(store, names)
    finally:
        store.close()
    assert _check(read.histories) > 100
