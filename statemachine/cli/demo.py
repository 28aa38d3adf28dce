"""``trial-replay demo``: a small real Ray Tune experiment with injected restore failures and
a driver crash and resume, then what ``trials`` and ``explain`` make of it: the demo runs
those very commands, so it prints exactly what they print.

Two trials run on an embedded SQLite log (``statemachine.db`` in the experiment folder,
written by :class:`statemachine.tune.EventLogCallback`): ``restore_flaky`` fails in training,
then every restore of its checkpoint fails; ``recovers`` fails in training, its first restore
fails, the second works. The first driver process is killed while ``restore_flaky``'s second
restore attempt hangs (a crash: its session never ends); a second driver continues with
``Tuner.restore``. The log kept the restore retry already spent, so the trial gives up after
``TUNE_RESTORE_RETRY_NUM=2`` retries in all, where plain Ray would grant two more.

Ray rewrites its experiment state in place, so the kill can leave it torn (CI saw it once);
``Tuner.restore`` would then start over. The demo keeps the complete copy it reads just before
the kill and puts it back in that case, saying so.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from statemachine.cli.db import DB_URL_ENV, DEFAULT_LOG_FILENAME, BadInput, open_store
from statemachine.cli.explain import explain_trial
from statemachine.cli.invocation import replay_command
from statemachine.cli.output import Output, json_option
from statemachine.cli.reading import decode_trial, fold_states, session_ends, session_kinds
from statemachine.cli.safe_text import cell
from statemachine.cli.schema import trial_row
from statemachine.distribution import install_hint

NAME = "demo"
RESTORE_RETRY_NUM = 2
#: Per-step time limits (seconds): generous for a loaded 2-core machine.
WAIT_FOR_CRASH_POINT = 90.0
WAIT_FOR_RESTORE = 120.0


class DemoError(click.ClickException):
    """The demo could not run (Ray missing, a driver failed): one line, exit 1."""

    exit_code = 1


def _driver_env() -> dict[str, str]:
    package_root = str(Path(__file__).resolve().parents[2])
    env = {k: v for k, v in os.environ.items() if k != DB_URL_ENV}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    env.update({"TUNE_RESTORE_RETRY_NUM": str(RESTORE_RETRY_NUM),
                "TUNE_GLOBAL_CHECKPOINT_S": "0", "RAY_DEDUP_LOGS": "0",
                "RAY_AIR_NEW_OUTPUT": "0", "PYTHONUNBUFFERED": "1"})
    return env


def _start(mode: str, storage: Path, ctl: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "statemachine.cli.demo_driver", mode, str(storage), NAME,
             str(ctl)],
            stdout=out, stderr=subprocess.STDOUT, env=_driver_env(), start_new_session=True,
        )


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the driver and everything it started (its own process group)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def _tail(log: Path) -> str:
    text = log.read_text(errors="replace") if log.exists() else ""
    return " | ".join(text.strip().splitlines()[-3:])


class Progress:
    """What the demo is doing while a driver runs: a spinner on stderr with the step, the
    seconds so far and the latest event the callback recorded (its trial, type, decision).

    Drawn only on a terminal; otherwise (a pipe, a CI log) the step lines printed by ``say``
    are all there is.
    """

    def __init__(self, db_file: Path, echo: Callable[[str], None],
                 console: Any = None) -> None:
        from rich.console import Console

        self.db_file = db_file
        self.echo = echo
        self.console = console if console is not None else Console(stderr=True)
        self.step = ""
        self.started = time.monotonic()
        self.events = 0
        self.latest = ""
        self._position = 0
        self._store: Any = None
        self._live: Any = None
        self._spinner: Any = None

    def __enter__(self) -> Progress:
        if self.console.is_terminal:
            from rich.live import Live
            from rich.spinner import Spinner

            self._spinner = Spinner("dots", text="starting")
            # transient: stopping it erases its line, so nothing of it stays on the screen
            self._live = Live(self._spinner, console=self.console, transient=True,
                              refresh_per_second=12.5)
            self._live.start(refresh=True)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.stop()
        if self._store is not None:
            self._store.close()

    def say(self, text: str) -> None:
        """Print a line of the demo's story: the spinner's line is erased first (on a
        terminal stdout and stderr share the screen, and a line printed under a live
        spinner lands after its text) and drawn again under it."""
        if self._live is not None:
            self._live.stop()
        self.echo(text)
        if self._live is not None:
            self._live.start(refresh=True)

    def begin(self, step: str) -> None:
        """A new step (shown until the next one)."""
        self.step = step
        self.tick()

    def tick(self) -> None:
        """Read the log's new events and redraw the line."""
        self._read()
        if self._live is None:
            return
        from rich.text import Text

        seen = (f"{self.events} events, latest: {self.latest}" if self.events
                else "starting Ray")
        line = Text(self.step)  # text from the log is shown literally (cell: no markup)
        line.append_text(cell(f" ({time.monotonic() - self.started:.0f} s; {seen})", "dim"))
        self._spinner.update(text=line)
        self._live.refresh()

    def _read(self) -> None:
        from statemachine.exceptions import StateMachineError
        from statemachine.log import EventStore

        try:
            if self._store is None:
                if not self.db_file.is_file():
                    return
                self._store = EventStore.open(str(self.db_file), create=False)
            for row in self._store.read_experiment(NAME, from_position=self._position):
                self._position = max(self._position, row.position)
                self.events += 1
                decision = f" -> {row.decision}" if row.decision else ""
                self.latest = f"{row.trial_id} {row.type_name}{decision}"
        except StateMachineError:
            pass  # the log is being created, or migrated: next tick


def complete_state(experiment: Path, tries: int = 10) -> tuple[Path, bytes] | None:
    """Ray's newest experiment state file and its bytes, once they are complete (they parse
    as JSON; a write under way is waited out for up to ``tries`` tenths of a second)."""
    for attempt in range(tries):
        states = sorted(experiment.glob("experiment_state-*.json"))
        if states:
            data = states[-1].read_bytes()
            try:
                json.loads(data)
            except ValueError:
                pass
            else:
                return states[-1], data
        if attempt + 1 < tries:
            time.sleep(0.1)
    return None


def put_back_if_torn(path: Path, data: bytes) -> bool:
    """Write ``data`` back to ``path`` if a kill left the file torn (empty, or cut short:
    ``Tuner.restore`` would start the experiment over); whether it did."""
    try:
        json.loads(path.read_bytes())
    except ValueError:
        path.write_bytes(data)
        return True
    return False


def run_experiment(workdir: Path, say: Any) -> dict[str, Any]:
    """Run both drivers; return where the experiment and its log are."""
    from statemachine.cli.demo_trainable import restore_attempts

    storage, ctl, log = workdir / "results", workdir / "ctl", workdir / "driver.log"
    ctl.mkdir(parents=True, exist_ok=True)
    (ctl / "fail-restores-restore_flaky").write_text("-1")
    (ctl / "fail-restores-recovers").write_text("1")
    (ctl / "hang-restore-restore_flaky").write_text("2")
    started = time.monotonic()
    with Progress(storage / NAME / DEFAULT_LOG_FILENAME, say) as progress:
        say = progress.say
        say(f"Driver 1: Tuner.fit() of 2 trials with EventLogCallback, max_failures=1, "
            f"TUNE_RESTORE_RETRY_NUM={RESTORE_RETRY_NUM} (Ray's default is 0: no restore "
            f"retry) (Ray output: {log})")
        progress.begin("Driver 1: Tuner.fit()")
        first = _start("fit", storage, ctl, log)
        kept: tuple[Path, bytes] | None = None
        try:
            deadline = time.monotonic() + WAIT_FOR_CRASH_POINT
            while restore_attempts(ctl, "restore_flaky") < 2:
                if first.poll() is not None:
                    raise DemoError(
                        f"driver 1 ended early (exit {first.returncode}): {_tail(log)}")
                if time.monotonic() > deadline:
                    raise DemoError(f"driver 1 never reached the crash point: {_tail(log)}")
                time.sleep(0.2)
                progress.tick()
            time.sleep(1.0)  # let Tune save its experiment state as it would before a crash
            kept = complete_state(storage / NAME)
        finally:
            _kill(first)
        (ctl / "hang-restore-restore_flaky").unlink()
        say(f"Driver 1 killed with SIGKILL during restore attempt 2 of restore_flaky "
            f"({time.monotonic() - started:.0f} s in)")
        if kept is not None and put_back_if_torn(*kept):
            say("The kill tore Ray's experiment state (Ray rewrites it in place; see "
                "docs/tune.md, \"Killed drivers\"): the demo put back the complete copy it "
                "read just before, as a user restores a backup")
        say("Driver 2: Tuner.restore() of the same experiment")
        progress.begin("Driver 2: Tuner.restore()")
        second = _start("restore", storage, ctl, log)
        try:
            deadline = time.monotonic() + WAIT_FOR_RESTORE
            while second.poll() is None:
                if time.monotonic() > deadline:
                    raise DemoError(f"driver 2 did not finish in {WAIT_FOR_RESTORE:.0f} s: "
                                    f"{_tail(log)}")
                time.sleep(0.2)
                progress.tick()
            code = second.returncode
        finally:
            _kill(second)
    if code != 0:
        raise DemoError(f"driver 2 failed (exit {code}): {_tail(log)}")
    folder = storage / NAME
    if not (folder / DEFAULT_LOG_FILENAME).is_file():
        raise DemoError(f"no event log was written in {folder}: {_tail(log)}")
    return {"folder": folder, "seconds": round(time.monotonic() - started, 1), "log": log}


def _tag(stored: list[Any]) -> str:
    """The demo variant's tag from the trial's ``TrialAdded`` config."""
    for row in stored:
        if row.type_name == "TrialAdded":
            variant = row.payload.get("config", {}).get("variant", {})
            return str(variant.get("tag", "")) if isinstance(variant, dict) else ""
    return ""


def _interest(row: dict[str, Any]) -> tuple[int, int, int]:
    return (row["status"] == "ERROR", row["total_restore_failures"], row["num_failures"])


@dataclass(frozen=True)
class Outcome:
    """What the demo's log holds: each trial's row and tag, and the trial worth explaining."""

    rows: list[dict[str, Any]]
    tags: dict[str, str]
    chosen: str


def read_outcome(folder: Path, experiment: str, out: Output) -> Outcome:
    """Each trial's row and tag from the log in ``folder``, and the most interesting trial
    (ERROR first, then the most restore failures, then the most failures)."""
    with open_store(str(folder)) as store:
        rows = [trial_row(s) for s in fold_states(store, experiment, out)]
        tags = {r["trial_id"]: _tag(store.read_trial(experiment, r["trial_id"])) for r in rows}
    return Outcome(rows, tags, max(rows, key=_interest)["trial_id"])


def report(folder: Path, experiment: str, outcome: Outcome,
           run_command: Callable[[list[str]], int], say: Callable[[str], None]) -> int:
    """Print ``trials`` and ``explain`` of the demo's log by running those very commands
    (``run_command``: the CLI's own entry point), each under the command line that prints
    it, so what the demo shows is what the user gets when pasting it; then the commands to
    try next. Returns the worst exit code of the commands."""
    code = 0
    tagged = [f"{tag} is trial {trial_id}" for trial_id, tag in outcome.tags.items() if tag]
    if tagged:
        say("; ".join(tagged) + ".")
        say("")
    for args in (["trials", experiment], ["explain", experiment, outcome.chosen]):
        say(f"$ {replay_command('--db', folder, *args)}")
        code = max(code, run_command(["--db", str(folder), *args]))
        say("")
    say(f"Try: {replay_command('--db', folder, 'timeline', experiment, '-o', 'timeline.html')}")
    say(f"     {replay_command('--db', folder, 'serve')}")
    return code


@click.command("demo")
@click.option("--dir", "workdir", type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the experiment (default: a new temporary folder, kept).")
@json_option
@click.pass_obj
def demo(out: Output, workdir: Path | None, as_json: bool) -> int:
    """Run a small real Ray Tune experiment (2 trials, 2 CPUs) on an embedded SQLite log with
    injected restore failures and a driver crash and resume, then print ``trials`` and
    ``explain`` for the most interesting trial (what those commands print). Needs the
    ``ray`` extra."""
    try:
        import ray  # noqa: F401
    except ImportError:
        raise BadInput(f"the demo needs Ray Tune: {install_hint('ray')}") from None
    if workdir is None:
        workdir = Path(tempfile.mkdtemp(prefix="trial-replay-demo-"))
    # Ray's storage_path must be absolute (a relative one fails in pyarrow: "URI has empty
    # scheme"), and the commands printed at the end must work from any folder.
    workdir = workdir.expanduser().absolute()
    if workdir.exists() and any(workdir.iterdir()):
        raise BadInput(f"--dir {workdir} is not empty; give a new or empty folder")
    workdir.mkdir(parents=True, exist_ok=True)

    def say(text: str) -> None:
        click.echo(text, err=as_json)

    run = run_experiment(workdir, say)
    folder: Path = run["folder"]
    outcome = read_outcome(folder, NAME, out)
    if as_json:
        with open_store(str(folder)) as store:
            sessions = store.list_sessions(NAME)
            explanation = explain_trial(
                outcome.chosen, decode_trial(store.read_trial(NAME, outcome.chosen), out),
                session_ends(sessions), session_kinds(sessions),
            )
        out.json({"experiment": NAME, "folder": str(folder), "seconds": run["seconds"],
                  "trials": [{**r, "tag": outcome.tags[r["trial_id"]]} for r in outcome.rows],
                  "explain": explanation.to_dict(NAME)})
        return out.exit_code
    say(f"Done in {run['seconds']} s. The event log: {folder / DEFAULT_LOG_FILENAME}")
    say("")
    root = click.get_current_context().find_root().command

    def run_command(args: list[str]) -> int:
        # The CLI itself, as the user will run it: the same code path, the same output.
        return int(root.main(args, standalone_mode=False))

    code = report(folder, NAME, outcome, run_command, say)
    return max(out.exit_code, code)
