"""The ``trial-replay`` command group and its error policy.

Every failure a user can cause (a bad path, an unknown experiment, a database newer than the
code, a bad option value) ends as one line on stderr and exit code 2; ``verify`` exits 1 when
the log does not replay. Only :class:`StateMachineError` and click's own usage errors are
caught: anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import Any

import click

from statemachine.cli.db import DB_URL_ENV, BadInput
from statemachine.distribution import VERSION
from statemachine.exceptions import StateMachineError

PROG = "trial-replay"

#: Exit code of every bad input (click's usage errors use the same code).
EXIT_BAD_INPUT = 2


def _one_line(text: str) -> str:
    from statemachine.cli.safe_text import one_line  # rich: loaded when a message is printed

    return one_line(text)  # names from the log may hold control characters


class ReplayGroup(click.Group):
    """A click group whose ``main`` turns expected errors into one stderr line and a code."""

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> int:
        """Run the command line; return (or, standalone, exit with) the exit code."""
        # Messages always name the console script, whoever calls (CliRunner passes its own).
        code = self._run(args, PROG, complete_var, **extra)
        if standalone_mode:
            sys.exit(code)
        return code

    def _run(
        self,
        args: Sequence[str] | None,
        prog_name: str,
        complete_var: str | None,
        **extra: Any,
    ) -> int:
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except StateMachineError as exc:
            click.echo(f"{prog_name}: error: {_one_line(str(exc))}", err=True)
            return EXIT_BAD_INPUT
        except click.exceptions.NoArgsIsHelpError as exc:
            exc.show()  # no command given: the help, as click prints it
            return exc.exit_code
        except click.UsageError as exc:
            hint = ""
            if exc.ctx is not None:
                hint = f" (see '{exc.ctx.command_path} --help')"
            click.echo(f"{prog_name}: error: {_one_line(exc.format_message())}{hint}", err=True)
            return exc.exit_code
        except click.ClickException as exc:
            click.echo(f"{prog_name}: error: {_one_line(exc.format_message())}", err=True)
            return exc.exit_code
        except click.Abort:
            click.echo(f"{prog_name}: interrupted", err=True)
            return 130
        return rv if isinstance(rv, int) else 0

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command's name, without importing any command's module."""
        return sorted({*COMMANDS, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command ``cmd_name``, its module imported on first use (so ``--version`` and
        each command pay only for what they run: the log, Ray, the web server... load
        where a command needs them)."""
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            module, attribute = COMMANDS[cmd_name].split(":")
            command = getattr(importlib.import_module(f"statemachine.cli.{module}"), attribute)
            if command.name != cmd_name:
                raise AssertionError(f"COMMANDS[{cmd_name!r}] is the command {command.name!r}")
            _with_db_option(command)
            self.add_command(command)
        return self.commands.get(cmd_name)


#: Every command of ``trial-replay``: its name -> ``module:attribute`` under
#: ``statemachine.cli``, imported when the command runs (or ``--help`` lists it). The one place
#: a new command is registered (write it in its own module under ``commands/``).
COMMANDS = {
    "experiments": "commands.experiments:experiments",
    "trials": "commands.trials:trials",
    "show": "commands.show:show",
    "explain": "commands.explain:explain",
    "nodes": "commands.nodes:nodes",
    "what-if": "commands.whatif:what_if",
    "advise": "commands.advise:advise_command",
    "timeline": "commands.timeline:timeline",
    "diagram": "commands.diagram:diagram",
    "tail": "commands.tail:tail",
    "serve": "commands.serve:serve",
    "verify": "commands.verify:verify",
    "export": "commands.transfer:export",
    "import": "commands.transfer:import_",
    "ingest": "commands.ingest:ingest",
    "db": "commands.database:db",
    "drill": "commands.drill:drill",
    "demo": "demo:demo",
}


@click.group(PROG, cls=ReplayGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--db",
    "-d",
    envvar=DB_URL_ENV,
    show_envvar=True,
    metavar="URL|FILE|FOLDER",
    help=(
        "The event log: a SQLAlchemy URL, a SQLite file, an experiment folder, or an "
        "experiment on storage (s3://bucket/path/experiment, read from a downloaded copy). "
        "Also accepted after the command."
    ),
)
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON, as the command's own --json (schema in docs/cli.md).")
@click.version_option(VERSION, prog_name=PROG)  # not the metadata's: no importlib.metadata
@click.pass_context
def cli(ctx: click.Context, db: str | None, as_json: bool) -> None:
    """Replay a Ray Tune experiment's trial event log: what happened to each trial, why it
    ended where it did, and what another retry policy would have done."""
    if as_json and ctx.invoked_subcommand is not None:
        command = cli.get_command(ctx, ctx.invoked_subcommand)
        if command is not None and not _takes_json(command):
            raise BadInput(f"{ctx.invoked_subcommand} prints no JSON; leave out --json")
    from statemachine.cli.output import Output  # rich: not loaded for --version and --help

    ctx.obj = Output(db=db, as_json=as_json)


def _takes_json(command: click.Command) -> bool:
    """Whether ``command`` (every command of a group) has a ``--json`` flag."""
    if isinstance(command, click.Group):
        return all(_takes_json(sub) for sub in command.commands.values())
    return any("--json" in p.opts for p in command.params if isinstance(p, click.Option))


def _set_db(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    """``--db`` given after the command: it wins over the one before it and the variable."""
    if value is not None:
        from statemachine.cli.output import Output

        ctx.ensure_object(Output).db = value


def _db_option() -> click.Option:
    return click.Option(
        ["--db", "-d"], metavar="URL|FILE|FOLDER", expose_value=False, is_eager=True,
        callback=_set_db, help="The event log (as the --db before the command).",
    )


def _with_db_option(command: click.Command) -> None:
    """Accept ``--db``/``-d`` after ``command`` (and after each of a group's commands)."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _with_db_option(sub)
    if not any("--db" in p.opts for p in command.params if isinstance(p, click.Option)):
        command.params.append(_db_option())


def main(argv: list[str] | None = None) -> int:
    """Run ``trial-replay`` with ``argv`` (default: ``sys.argv[1:]``); return the exit code."""
    return cli.main(argv, prog_name=PROG, standalone_mode=False)


def run() -> None:
    """Console-script entry point: exit with :func:`main`'s code."""
    sys.exit(main())
