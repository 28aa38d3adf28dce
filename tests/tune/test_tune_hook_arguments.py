"""Every hook accepts what Tune's ``Callback`` signature allows (issue 27, finding a).

Ray's own ``test_controller_callback_integration.py::test_callback_save_restore`` calls
``on_trial_result(iteration=i, trials=None, trial=None, result=None)`` through the controller's
``CallbackList``. A hook must take that (and every other call Tune's signatures allow: keyword
arguments only, ``None`` trials) without an error inside its never-raise guard: a hook error is
logged and counted, and Ray's test teardown fails on it.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.ray_support import running_ray
from tests.tune.tunekit import worker_pythonpath


def hooks() -> list[str]:
    from ray.tune import Callback

    from statemachine.tune import EventLogCallback

    return sorted(name for name in vars(EventLogCallback)
                  if name.startswith("on_") and callable(getattr(Callback, name, None)))


def none_arguments(name: str) -> dict[str, Any]:
    """Every named parameter of Tune's own hook, as ``None`` (what Ray's test passes)."""
    from ray.tune import Callback

    params = inspect.signature(getattr(Callback, name)).parameters
    return {p: None for p, spec in params.items()
            if p != "self" and spec.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD}


@pytest.mark.parametrize("name", hooks())
def test_every_hook_takes_none_for_each_argument_tune_names(
        name: str, caplog: pytest.LogCaptureFixture) -> None:
    from statemachine.tune import EventLogCallback

    callback = EventLogCallback()
    caplog.set_level(logging.ERROR)
    for i in range(3):  # as Ray's test: three calls, then a fresh step
        kwargs = none_arguments(name)
        if "iteration" in kwargs:
            kwargs["iteration"] = i
        getattr(callback, name)(**kwargs)
    getattr(callback, name)()  # nothing at all: every argument is optional in the hook
    assert callback.hook_errors == 0
    assert not [r for r in caplog.records if r.name.startswith("statemachine")]
    assert callback.events_recorded == 0


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    with running_ray(worker_pythonpath()):
        yield


@pytest.mark.ray
def test_rays_callback_save_restore_with_the_callback_in_the_controller(
        ray_cluster: None, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Ray's test, with a real storage: the callback state round-trips, no hook error."""
    from ray.train._internal.storage import StorageContext
    from ray.tune import Callback
    try:  # Ray 2.60 (2.40 keeps it in experiment_state, private)
        from ray.tune.tune_config import ResumeConfig
    except ImportError:
        from ray.tune.execution.experiment_state import _ResumeConfig as ResumeConfig
    from ray.tune.execution.tune_controller import TuneController
    from ray.tune.experiment import Trial

    from statemachine.tune import EventLogCallback

    class Stateful(Callback):
        def __init__(self) -> None:
            self.counter = 0

        def on_trial_result(self, iteration: Any, trials: Any, trial: Any, result: Any,
                            **info: Any) -> None:
            self.counter += 1

        def get_state(self) -> dict[str, int]:
            return {"counter": self.counter}

        def set_state(self, state: dict[str, int]) -> None:
            self.counter = state["counter"]

    from ray import tune

    tune.register_trainable("__fake", lambda config: None)  # Ray's tests register it so
    storage = StorageContext(storage_path=str(tmp_path / "results"),
                             experiment_dir_name="save_restore")
    storage.storage_filesystem.create_dir(storage.experiment_fs_path)
    ours = EventLogCallback()
    caplog.set_level(logging.ERROR)
    runner = TuneController(callbacks=[Stateful(), ours], storage=storage)
    runner.add_trial(Trial("__fake", stub=True, storage=storage))
    for i in range(3):
        runner._callbacks.on_trial_result(iteration=i, trials=None, trial=None, result=None)
    runner.checkpoint(force=True, wait=True)  # 2.40 syncs to storage in the background
    again = Stateful()
    ours_again = EventLogCallback()
    runner2 = TuneController(callbacks=[again, ours_again], storage=storage)
    assert again.counter == 0
    runner2.resume(ResumeConfig())
    assert again.counter == 3
    assert (ours.hook_errors, ours_again.hook_errors) == (0, 0)
    assert not [r for r in caplog.records if r.name.startswith("statemachine")]
