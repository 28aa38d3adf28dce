"""``trial-replay serve``: the event log as live local web pages (Starlette on uvicorn).

One job per module:

- :mod:`~statemachine.cli.web.pages`: the HTML of each page, built from the log;
- :mod:`~statemachine.cli.web.routes`: which path answers what (pages, JSON, the package's
  static files in ``static/``), and how a failure answers (404, 503 with the reason);
- :mod:`~statemachine.cli.web.transport`: what every answer gets whatever the page: the
  ``Host`` allow-list (DNS rebinding) and the security headers;
- :mod:`~statemachine.cli.web.server`: the listening socket and uvicorn, with an idle
  connection timeout.

The command itself (options, the warning for a non-loopback address) is
:mod:`statemachine.cli.commands.serve`.
"""

from statemachine.cli.web.pages import POLL_SECONDS, NotFound, Pages

__all__ = ["POLL_SECONDS", "NotFound", "Pages"]
