"""``trial-replay serve``: the timeline and each trial's explanation as live local web pages."""

from __future__ import annotations

import webbrowser
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import click

from statemachine.cli.db import BadInput, open_store
from statemachine.cli.output import Output
from statemachine.cli.reading import require_experiment
from statemachine.cli.web import Pages, make_server

if TYPE_CHECKING:
    from statemachine.log import EventStore


@click.command("serve")
@click.argument("experiment", required=False)
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (the default serves this machine only).")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True,
              help="Port to listen on (0: any free port).")
@click.option("--open", "open_browser", is_flag=True, help="Open the page in a browser.")
@click.pass_obj
def serve(
    out: Output, experiment: str | None, host: str, port: int, open_browser: bool
) -> int:
    """Serve the timeline and each trial's explanation as local web pages that reload
    themselves while the experiment runs (until interrupted, Ctrl-C). EXPERIMENT (default:
    the only one in the log) is the first page; the others are a click away."""
    db = out.db

    @contextmanager
    def opened() -> Iterator[EventStore]:
        with open_store(db) as store:
            yield store

    with opened() as store:  # bad --db or experiment: one line now, not in the browser
        names = [i.name for i in store.list_experiments()]
        first = require_experiment(store, experiment) if experiment or len(names) == 1 else None
    try:
        server = make_server(host, port, Pages(opened, out))
    except OSError as exc:
        raise BadInput(f"cannot listen on {host}:{port}: {exc.strerror or exc}; "
                       "pass another --port (0: any free port)") from None
    bound_host, bound_port = str(server.server_address[0]), int(server.server_address[1])
    shown = "127.0.0.1" if bound_host in ("0.0.0.0", "") else bound_host
    url = f"http://{shown}:{bound_port}/"
    if first is not None:
        from urllib.parse import quote

        url += f"e/{quote(first, safe='')}"
    click.echo(f"Serving {url} (Ctrl-C stops)", err=False)
    if open_browser:
        webbrowser.open(url)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
