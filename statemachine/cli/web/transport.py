"""What ``trial-replay serve`` checks and adds on every request, whatever the page.

- **Host allow-list** (:class:`HostAllowList`): a page of another site whose name resolves to
  this machine (DNS rebinding) sends its own name in ``Host``; only the names the server was
  bound to are answered (:func:`allowed_hosts`), anything else gets ``421 Misdirected
  Request`` before any page is built.
- **Security headers** (:class:`SecurityHeaders`): a Content-Security-Policy that lets a page
  run and load only this server's own files (no inline script, nothing from elsewhere) and be
  framed by no one, ``X-Content-Type-Options: nosniff``, ``Referrer-Policy: no-referrer``,
  and no caching of pages (they hold error messages and paths).

Both are plain ASGI middleware around the whole application (:func:`guarded`), so they
apply to every answer: pages, JSON, static files, 404, 405 and 500 alike.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "CONTENT_SECURITY_POLICY",
    "AllowedHosts",
    "HostAllowList",
    "SecurityHeaders",
    "allowed_hosts",
    "guarded",
    "host_name",
    "is_loopback",
    "is_wildcard",
]

#: Scripts, styles, pictures and requests from this server only; no plugin, no framing, no
#: ``<base>``, no form posting anywhere.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)

_HEADERS = [
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
]

#: The names of this machine's loopback interface, as a browser spells them.
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def is_wildcard(host: str) -> bool:
    """Whether binding ``host`` listens on every address of the machine (``0.0.0.0``, ``::``)."""
    address = _address(host)
    return host == "" or (address is not None and address.is_unspecified)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or a name) reaches this machine only: every address it
    resolves to is a loopback address. A name that does not resolve is not loopback."""
    address = _address(host)
    if address is not None:
        return address.is_loopback
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return False
    return bool(infos) and all(
        ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]).is_loopback for info in infos
    )


def host_name(header: str) -> str:
    """The host name of a ``Host`` header: lower case, without port, brackets or final dot."""
    value = header.strip().lower()
    if value.startswith("["):  # [v6]:port
        value = value[1:].split("]", 1)[0]
    elif value.count(":") == 1:
        value = value.split(":", 1)[0]
    return value.rstrip(".")


@dataclass(frozen=True)
class AllowedHosts:
    """The ``Host`` names a server answers: ``names``, plus any IP address if ``addresses``."""

    names: frozenset[str]
    addresses: bool = False

    def allows(self, header: str) -> bool:
        """Whether a request with this ``Host`` header is answered."""
        name = host_name(header)
        if name in self.names:
            return True
        address = _address(name)
        # An address cannot be rebound to another machine as a name can: a page whose origin
        # is an IP address is that machine's own.
        return self.addresses and address is not None

    def describe(self) -> str:
        """``localhost, 127.0.0.1, ::1`` (and ``any IP address``): for messages."""
        listed = ", ".join(sorted(self.names))
        return listed + (", any IP address of this machine" if self.addresses else "")


def allowed_hosts(given: str, bound: str, extra: Iterable[str] = ()) -> AllowedHosts:
    """The ``Host`` names answered by a server bound for ``given`` (``--host``) to the address
    ``bound``, plus ``extra`` (``--allow-host``).

    A loopback bind answers its name and address and this machine's loopback names; another
    address or name answers that name and address and this machine's host names; a wildcard
    bind (``0.0.0.0``, ``::``) answers this machine's names and any IP address.
    """
    wildcard = is_wildcard(given) or is_wildcard(bound)
    names = set() if wildcard else {host_name(given), host_name(bound)}
    names.update(host_name(name) for name in extra)
    loopback = not wildcard and is_loopback(bound)
    if wildcard or loopback:
        names.update(LOOPBACK_NAMES)
    if not loopback:
        names.update(host_name(n) for n in (socket.gethostname(), socket.getfqdn()) if n)
    names.discard("")
    return AllowedHosts(frozenset(names), addresses=wildcard)


class HostAllowList:
    """ASGI middleware: answer only requests whose ``Host`` is allowed; others get 421."""

    def __init__(self, app: ASGIApp, allowed: AllowedHosts) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), "")
        if self.allowed.allows(host):
            await self.app(scope, receive, send)
            return
        body = (f"421 Misdirected Request: this server answers requests for "
                f"{self.allowed.describe()} only, not {host_name(host)!r} (trial-replay serve "
                "--allow-host NAME adds a name)\n").encode("utf-8", "replace")
        await send({"type": "http.response.start", "status": 421, "headers": [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]})
        await send({"type": "http.response.body", "body": body})


class SecurityHeaders:
    """ASGI middleware: the security headers on every answer; pages not cached (static files
    revalidated: ``no-cache``), unless the answer set its own ``Cache-Control``."""

    def __init__(self, app: ASGIApp, static_prefix: str) -> None:
        self.app = app
        self.static_prefix = static_prefix.rstrip("/") + "/"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = str(scope.get("path", "")).startswith(self.static_prefix)
        cache = b"no-cache" if static else b"no-store"

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                headers += [h for h in _HEADERS if h[0] not in present]
                if b"cache-control" not in present:
                    headers.append((b"cache-control", cache))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def guarded(app: ASGIApp, allowed: AllowedHosts, static_prefix: str) -> ASGIApp:
    """``app`` behind the host allow-list, every answer with the security headers."""
    return SecurityHeaders(HostAllowList(app, allowed), static_prefix)
