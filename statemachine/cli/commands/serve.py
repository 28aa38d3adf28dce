"""``trial-replay serve``: the experiments, their trials, timelines and nodes as live local web
pages."""

from __future__ import annotations

import socket
import webbrowser
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING
from urllib.parse import quote

import click

from statemachine.cli.db import BadInput, open_resolved, open_store, resolve_db
from statemachine.cli.output import Output
from statemachine.cli.reading import require_experiment
from statemachine.cli.web import Pages
from statemachine.cli.web.pages import STATIC_PATH

if TYPE_CHECKING:
    from statemachine.log import EventStore


@click.command("serve")
@click.argument("experiment", required=False)
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (the default serves this machine only; anything "
                   "else lets anyone who reaches it read the pages: there is no login).")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True,
              help="Port to listen on (0: any free port).")
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="NAME",
              help="Also answer requests for this host name (a DNS name or proxy in front "
                   "of the server); repeatable. Other names get 421.")
@click.option("--open", "open_browser", is_flag=True, help="Open the page in a browser.")
@click.pass_obj
def serve(
    out: Output, experiment: str | None, host: str, port: int, allow_hosts: tuple[str, ...],
    open_browser: bool,
) -> int:
    """Serve local web pages to debug an experiment (until interrupted, Ctrl-C): status
    counts, a trial table filtered and sorted a page at a time, a timeline, each trial's
    failures and restores, the nodes; they follow the log while the experiment runs.
    EXPERIMENT (default: the only one in the log) is the first page."""
    # Starlette and uvicorn are imported here: every other command starts without them.
    from statemachine.cli.web.routes import build_app
    from statemachine.cli.web.server import listen, run, shown_url
    from statemachine.cli.web.transport import allowed_hosts, guarded, is_loopback, is_wildcard
    from statemachine.log.remote import is_storage_uri

    # Resolved once: a log deleted while serving is then "no event log at PATH" (503).
    target = out.db if out.db and is_storage_uri(out.db) else resolve_db(out.db)

    @contextmanager
    def opened() -> Iterator[EventStore]:
        with open_resolved(target) as store:
            yield store

    with open_store(out.db) as store:  # bad --db or experiment: one line now, not in the browser
        names = [i.name for i in store.list_experiments()]
        first = require_experiment(store, experiment) if experiment or len(names) == 1 else None
    try:
        sock = listen(host, port)
    except OSError as exc:
        fix = ("check --host" if isinstance(exc, socket.gaierror)
               else "pass another --port (0: any free port)")
        raise BadInput(f"cannot listen on {host}:{port}: {exc.strerror or exc}; {fix}") from None
    bound = str(sock.getsockname()[0])
    allowed = allowed_hosts(host, bound, allow_hosts)
    app = guarded(build_app(Pages(opened, out), out.note), allowed, STATIC_PATH)
    url = shown_url(host, sock)
    if first is not None:
        url += f"e/{quote(first, safe='')}"
    if not is_loopback(bound):
        where = (f"{host or '0.0.0.0'} (every address of this machine)" if is_wildcard(host)
                 else host)
        out.note(f"trial-replay: warning: serving on {where}: anyone who can reach port "
                 f"{sock.getsockname()[1]} can read every page (trial names, error messages, "
                 "tracebacks, paths); there is no authentication")
    click.echo(f"Serving {url} (Ctrl-C stops)")
    if open_browser:
        webbrowser.open(url)
    try:
        run(app, sock)
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    return 0
