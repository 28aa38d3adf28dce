"""Listening for ``trial-replay serve``: the socket, and uvicorn serving the application on it.

The socket is bound here, before uvicorn starts, so a port that is taken is the command's
one-line error (uvicorn would log it and exit 1), and ``--port 0`` is known before the URL is
printed.

uvicorn closes a keep-alive connection idle for its ``timeout_keep_alive``, but never one
that has not sent a complete request yet: a connection that sends nothing, or half a request
head, would stay open for ever. :class:`IdleTimeoutProtocol` closes any connection that has
no request being answered for :data:`IDLE_TIMEOUT_S` seconds.
"""

from __future__ import annotations

import asyncio
import socket

import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["IDLE_TIMEOUT_S", "IdleTimeoutProtocol", "listen", "run", "shown_url"]

#: Seconds a connection may stay open without a request being answered (sending nothing,
#: half a request head, or idle between keep-alive requests: a browser polls every 2 s).
IDLE_TIMEOUT_S = 5
#: Seconds Ctrl-C waits for requests being answered before it cancels them.
GRACEFUL_STOP_S = 2
_BACKLOG = 512


class IdleTimeoutProtocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol, closing a connection that has no request being answered
    for ``timeout_keep_alive`` seconds, including one whose first request never arrives."""

    _idle: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        self._arm_idle()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm_idle()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        super().connection_lost(exc)

    def _arm_idle(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
        self._idle = self.loop.call_later(self.timeout_keep_alive, self._idle_expired)

    def _idle_expired(self) -> None:
        self._idle = None
        if self.cycle is not None and not self.cycle.response_complete:
            return  # a request is being answered; its end arms the timer again
        if not self.transport.is_closing():
            self.transport.close()


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port`` (``port`` 0: any free port); raises ``OSError``."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(_BACKLOG)
    except BaseException:
        sock.close()
        raise
    return sock


def shown_url(host: str, sock: socket.socket) -> str:
    """The URL to print for a server on ``sock`` bound for ``host``: the name as given, the
    address for an address, a loopback address for a wildcard bind."""
    address, port = sock.getsockname()[:2]
    shown = host if host and not _is_address(host) else str(address)
    if shown in ("0.0.0.0", ""):
        shown = "127.0.0.1"
    elif shown == "::":
        shown = "::1"
    if ":" in shown:
        shown = f"[{shown}]"
    return f"http://{shown}:{port}/"


def _is_address(host: str) -> bool:
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
    except OSError:
        return False
    return True


def run(app: ASGIApp, sock: socket.socket) -> None:
    """Serve ``app`` on ``sock`` until SIGINT (then ``KeyboardInterrupt``) or SIGTERM."""
    config = uvicorn.Config(
        app, http=IdleTimeoutProtocol, ws="none", lifespan="off", loop="asyncio",
        log_config=None, log_level="warning", access_log=False, server_header=False,
        proxy_headers=False, timeout_keep_alive=IDLE_TIMEOUT_S,
        timeout_graceful_shutdown=GRACEFUL_STOP_S, backlog=_BACKLOG,
    )
    uvicorn.Server(config).run(sockets=[sock])
