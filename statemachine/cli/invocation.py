"""How to run ``trial-replay`` from the user's shell, for the commands the CLI prints (see
:func:`statemachine.distribution.cli_command`)."""

from __future__ import annotations

from statemachine.distribution import cli_command, cli_program

__all__ = ["program", "replay_command"]

#: The shell words that start ``trial-replay`` here.
program = cli_program
#: A paste-able ``trial-replay ARGS`` command line.
replay_command = cli_command
