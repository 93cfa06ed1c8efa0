"""DNS rebinding: a page of evil.example whose name the attacker re-points at 127.0.0.1 is same-origin with what it
reaches by that name, so no CORS check sees it (hearth.api.cors: its GETs carry no Origin, its POSTs their own), and
it could drive a server that trusts the loopback address. Its requests still say `Host: evil.example:PORT`: a server
listening on a loopback address answers only requests that name it by localhost, an IP address or its own host name
(or the address it listens on), as Ollama's allowedHostsMiddleware does. Listening on 0.0.0.0 or a LAN address there is no check, as
Ollama: the user chose the exposure (and --api-key is the guard there). --allowed-hosts lets more names in (a
reverse proxy's, an /etc/hosts alias; '*.example.com' any name under one); '*' turns the check off."""

from __future__ import annotations

import ipaddress
import json
import socket
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from hearth.api.errors import error_body


def loopback(host: str) -> bool:
    """An address to listen on that only this machine reaches: 127.0.0.0/8, ::1, localhost."""
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str:
    """A Host header's or --allowed-hosts entry's name, without its port: 'Evil.example:8080' -> 'evil.example',
    '[::1]:8080' -> '::1'; a trailing dot dropped ('localhost.' is localhost); "" for what is no host[:port]
    ('evil@localhost', 'localhost/x': a URL's other parts, which no browser sends as a Host)."""
    header = header.strip()
    if any(c in header for c in "@/?#\\ "):
        return ""
    try:
        return (urlsplit("//" + header).hostname or "").rstrip(".")
    except ValueError:  # an unclosed '[': no name
        return ""


def _allowed(name: str, allowed: set[str]) -> bool:
    """name is an --allowed-hosts entry, or under a '*.example.com' one (any name ending in .example.com)."""
    return name in allowed or any(a.startswith("*.") and name.endswith(a[1:]) for a in allowed)


def _local_name(name: str) -> bool:
    """A name no attacker can re-point: localhost, *.localhost (browsers resolve those to the loopback
    themselves, RFC 6761) and any IP address (an address is never rebound: a page at http://0.0.0.0:PORT or
    http://[::ffff:127.0.0.1]:PORT reaches this machine by address, as Ollama lets in)."""
    if name.endswith(".localhost") or loopback(name):
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def host_check_on(listen: str | None, allowed: list[str]) -> bool:
    """Whether requests' Host is checked: listening on a loopback address, '*' not among --allowed-hosts. `listen`
    None: an app no `hearth serve` binds (in-process, tests), no check."""
    return listen is not None and loopback(listen) and "*" not in allowed


class HostCheckMiddleware:
    """403 for a request whose Host names neither this machine's loopback, the address listened on, nor an
    --allowed-hosts entry. A request without Host (HTTP/1.0), or with an empty one, passes: a browser always sends
    one."""

    def __init__(self, app: ASGIApp, listen: str, allowed: list[str]):
        self.app, self.listen = app, listen
        # this machine's own name too (Ollama's): resolved by its own resolver, not an attacker's DNS
        wildcards = {a.strip().lower().rstrip(".") for a in allowed if a.strip().startswith("*.")}
        self.allowed = {host_name(listen), socket.gethostname().lower(), *wildcards,
                        *(host_name(a) for a in allowed if a not in wildcards)} - {""}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        header = dict(scope["headers"]).get(b"host") if scope["type"] == "http" else None
        if header is None or not header.strip():  # as Ollama: a browser always sends a name
            return await self.app(scope, receive, send)
        host = header.decode("latin-1")
        name = host_name(host)
        if _local_name(name) or _allowed(name, self.allowed):
            return await self.app(scope, receive, send)
        body = json.dumps(error_body(scope["path"], 403, self._why(host, name))).encode()
        await send({"type": "http.response.start", "status": 403,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    def _why(self, host: str, name: str) -> str:
        return (f"Host {host!r} is not a name of this server: it listens on {self.listen} and answers requests sent "
                "to localhost or a loopback address only (a page whose name is re-pointed at this machine, DNS "
                f"rebinding, must not drive it); start it with --allowed-hosts {name or host} to let that name in "
                "(comma-separated, '*' for any)")
