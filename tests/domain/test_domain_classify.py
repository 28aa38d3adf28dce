"""The classifier: (raw exception, phase) -> typed failure.

Ray's wrappers (``RayTaskError``, ``RayActorError``) are unwrapped in ``statemachine.tune``:
``tests/tune/test_tune_ray_errors.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from statemachine.domain.classify import classify
from statemachine.domain.failures import (
    AbortError,
    ActorError,
    RestoreError,
    TrainingError,
)
from statemachine.domain.status import Status

REPO = Path(__file__).resolve().parents[2]


class DataLoaderBroke(LookupError):
    """A user exception with a non-builtin base."""


def raised(exc: BaseException) -> BaseException:
    """``exc`` after a real raise, so that it carries a traceback."""
    try:
        raise exc
    except BaseException as caught:
        return caught


def test_plain_exception_while_running_is_a_training_error() -> None:
    error = classify(raised(ValueError("bad lr")), Status.RUNNING)
    assert type(error) is TrainingError
    assert (error.cause_type, error.message) == ("builtins.ValueError", "bad lr")
    assert "raise exc" in error.traceback and "ValueError: bad lr" in error.traceback


@pytest.mark.parametrize("phase", [Status.PENDING, Status.RUNNING, Status.PAUSED])
def test_user_exception_outside_restore_is_a_training_error(phase: Status) -> None:
    assert type(classify(DataLoaderBroke("x"), phase)) is TrainingError


def test_anything_while_restoring_is_a_restore_error() -> None:
    error = classify(raised(OSError("checkpoint missing")), Status.RESTORING)
    assert type(error) is RestoreError
    assert error.cause_type == "builtins.OSError"


def test_typed_failure_is_returned_as_is() -> None:
    error = ActorError("x.Y", "m", preempted=True)
    assert classify(error, Status.RESTORING) is error


@pytest.mark.parametrize(
    "listed",
    [
        "DataLoaderBroke",
        f"{__name__}.DataLoaderBroke",
        "LookupError",
        "builtins.LookupError",
    ],
)
def test_policy_listed_fatal_type_is_an_abort_by_short_or_qualified_name(listed: str) -> None:
    for phase in (Status.RUNNING, Status.RESTORING):
        error = classify(raised(DataLoaderBroke("no data")), phase, [listed])
        assert type(error) is AbortError
        assert error.cause_type.endswith("DataLoaderBroke")
        assert error.message == "no data"


def test_unlisted_type_is_not_fatal() -> None:
    error = classify(DataLoaderBroke("x"), Status.RUNNING, ["ValueError", "my.DataLoaderBroke"])
    assert type(error) is TrainingError


def test_classifying_a_plain_exception_does_not_import_ray() -> None:
    code = (
        "import sys, statemachine\n"
        "from statemachine import classify, Status\n"
        "e = classify(KeyError('k'), Status.RUNNING, ['ValueError'])\n"
        "assert type(e).__name__ == 'TrainingError', e\n"
        "bad = sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.'))\n"
        "print('RAY MODULES', bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "RAY MODULES []" in done.stdout


def test_no_module_of_the_domain_imports_ray_or_sql() -> None:
    # Also a deferred import inside a function: the domain must not know Ray (its wrappers
    # are unwrapped in statemachine.tune.ray_errors) nor the database.
    import ast

    found = []
    for path in sorted((REPO / "statemachine" / "domain").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{path.name}: {name}" for name in names
                      if name.split(".")[0] in {"ray", "sqlalchemy", "alembic"}]
    assert found == []
