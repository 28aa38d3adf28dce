"""The package's public names: ``__all__``, ``dir()`` and ``from statemachine import *``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import statemachine

REPO = Path(__file__).resolve().parents[1]


def _python(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip


def test_every_name_in_all_and_dir_is_there() -> None:
    assert len(set(statemachine.__all__)) == len(statemachine.__all__)
    assert set(statemachine.__all__) <= set(dir(statemachine))
    for name in statemachine.__all__:
        assert getattr(statemachine, name) is not None, name
    assert "EventLogCallback" in dir(statemachine)
    assert "EventLogCallback" not in statemachine.__all__  # needs the optional Ray extra


def test_import_star_without_ray() -> None:
    code = (
        "import sys\n"
        "sys.modules['ray'] = None  # Ray is not installed\n"
        "from statemachine import *\n"
        "import statemachine\n"
        "assert EventStore.__name__ == 'EventStore' and ConfigurationError\n"
        "assert 'EventLogCallback' in dir(statemachine)\n"
        "try:\n"
        "    statemachine.EventLogCallback\n"
        "except statemachine.StateMachineError as exc:\n"
        "    print('REFUSED', type(exc).__name__, exc)\n"
    )
    done = _python(code)
    assert done.returncode == 0, done.stderr
    assert "REFUSED UnsupportedRayError" in done.stdout
    assert "pip install 'tune-trial-statemachine[ray]'" in done.stdout


def test_import_star_does_not_import_ray() -> None:
    code = (
        "import sys\n"
        "from statemachine import *\n"
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))\n"
    )
    done = _python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
