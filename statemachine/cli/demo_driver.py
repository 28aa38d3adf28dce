"""The demo's Tune driver, run as its own process: ``python -m statemachine.cli.demo_driver``.

usage: ``python -m statemachine.cli.demo_driver fit|restore STORAGE NAME CTL``

``fit`` starts the experiment with :class:`statemachine.tune.EventLogCallback` (the demo kills
this process mid-run, as a crash would); ``restore`` continues it with ``Tuner.restore``, the
callback coming back from the experiment state by itself.
"""

from __future__ import annotations

import sys
from pathlib import Path

#: The demo's trials: one whose restores keep failing across the crash, one that recovers.
VARIANTS = [
    {"tag": "restore_flaky", "iters": 4, "fail_at": 2, "sleep": 0.3},
    {"tag": "recovers", "iters": 5, "fail_at": 3, "sleep": 0.3},
]
MAX_FAILURES = 1


def main(mode: str, storage: str, name: str, ctl: str) -> int:
    """Run the driver; returns the exit code."""
    import ray
    from ray import tune

    from statemachine.cli.demo_trainable import DemoTrainable
    from statemachine.tune import CheckpointConfig, FailureConfig, RunConfig

    ray.init(num_cpus=2, include_dashboard=False, address="local", log_to_driver=False,
             configure_logging=False)
    try:
        if mode == "fit":
            from statemachine.tune import EventLogCallback

            tuner = tune.Tuner(
                DemoTrainable,
                param_space={"ctl": ctl, "variant": tune.grid_search(VARIANTS)},
                run_config=RunConfig(
                    name=name,
                    storage_path=storage,
                    callbacks=[EventLogCallback()],
                    verbose=0,
                    failure_config=FailureConfig(max_failures=MAX_FAILURES),
                    checkpoint_config=CheckpointConfig(checkpoint_frequency=1),
                ),
            )
        else:
            tuner = tune.Tuner.restore(str(Path(storage, name)), trainable=DemoTrainable)
        tuner.fit()
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
