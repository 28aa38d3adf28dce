"""``trial-replay``: the replay CLI for debugging failed Ray Tune experiments.

Thin over :mod:`statemachine.log` and the pure domain: each command lives in its own module
under :mod:`statemachine.cli.commands`, prints through :mod:`statemachine.cli.output` (rich
tables, or ``--json`` with the schema of :mod:`statemachine.cli.schema`) and opens the log
through :mod:`statemachine.cli.db` (read-only for every read command).
"""

from statemachine.cli.app import cli, main, run

__all__ = ["cli", "main", "run"]
