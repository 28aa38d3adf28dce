"""Seeded random training failures, injected into every trainable of Ray's Tune examples.

Ray runs :func:`setup` in every worker process (``runtime_env``'s
``worker_process_setup_hook``): it wraps ``Trainable.train`` so an iteration fails with
probability ``SM_FAIL_P``, decided by ``SM_FAIL_SEED``, the trial's counter (the part of its
id Tune numbers in order) and the iteration; each (trial, iteration) fails at most once
(a marker file in ``SM_FAIL_DIR``), so retries make progress.
"""

from __future__ import annotations

import functools
import os
import random
from pathlib import Path
from typing import Any


class InjectedFailure(RuntimeError):
    """The failure this hook injects (a user error, as far as Ray can tell)."""


def setup() -> None:
    """Wrap ``Trainable.train`` once in this worker."""
    from ray.tune.trainable import Trainable

    original = Trainable.train
    if getattr(original, "_sm_injected", False):
        return
    seed = os.environ.get("SM_FAIL_SEED", "0")
    chance = float(os.environ.get("SM_FAIL_P", "0.1"))
    folder = Path(os.environ.get("SM_FAIL_DIR", "."))

    @functools.wraps(original)
    def train(self: Any) -> Any:
        trial = str(self.trial_id).rsplit("_", 1)[-1]
        iteration = int(self.iteration or 0)
        if random.Random(f"{seed}:{trial}:{iteration}").random() < chance:
            try:
                (folder / f"failed-{self.trial_id}-{iteration}").touch(exist_ok=False)
            except FileExistsError:
                pass
            else:
                raise InjectedFailure(f"injected failure at iteration {iteration}")
        return original(self)

    train._sm_injected = True  # type: ignore[attr-defined]
    Trainable.train = train  # type: ignore[method-assign]
