"""The name this project is installed under, and the commands built from it for users.

The import package is ``statemachine`` and the console script ``trial-replay``; the
distribution on the package index is :data:`DISTRIBUTION` (``statemachine`` there is an
unrelated project), so every hint that tells a user what to install is built here, and so is
every ``trial-replay`` command line a message suggests (:func:`cli_command`: it must work when
pasted, also from a virtualenv that is not activated).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

__all__ = ["CONSOLE_SCRIPT", "DISTRIBUTION", "VERSION", "cli_command", "install_hint"]

#: This release (``statemachine.__version__``, setup.cfg's ``version``; here so that a module
#: of the package can read it without importing the package's ``__init__``).
VERSION = "0.1.0"

#: The distribution name (``pip install tune-trial-statemachine``); setup.cfg's ``name``.
DISTRIBUTION = "tune-trial-statemachine"

#: The console script (setup.cfg's ``console_scripts``).
CONSOLE_SCRIPT = "trial-replay"


def install_hint(extra: str | None = None, *, reinstall: bool = False) -> str:
    """The pip command that installs this project (with ``extra``), ready to paste."""
    target = f"'{DISTRIBUTION}[{extra}]'" if extra else DISTRIBUTION
    return f"pip install {'--force-reinstall ' if reinstall else ''}{target}"


def _same_file(a: str | Path, b: str | Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def cli_program() -> str:
    """The shell words that start ``trial-replay`` here (quoted for a POSIX shell):
    ``trial-replay`` when that is the script on ``PATH``, else the full path of the script
    beside this Python (a virtualenv that is not activated), else ``python -m
    statemachine.cli``."""
    beside = Path(sys.executable).parent / CONSOLE_SCRIPT
    on_path = shutil.which(CONSOLE_SCRIPT)
    if on_path is not None and (not beside.is_file() or _same_file(on_path, beside)):
        return CONSOLE_SCRIPT
    if beside.is_file():
        return shlex.quote(str(beside.absolute()))
    return f"{shlex.quote(sys.executable)} -m statemachine.cli"


def cli_command(*args: str | Path) -> str:
    """A paste-able ``trial-replay ARGS`` command line (each argument quoted)."""
    return " ".join([cli_program(), *(shlex.quote(str(a)) for a in args)])
