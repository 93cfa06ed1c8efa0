"""An image's bytes from where a request put them: a `data:image/...;base64,` URL or bare base64 (decoded
here), or an http(s) URL (fetched with the standard library, a timeout all told, a size cap and an address policy,
FetchPolicy; the routes run it in FETCH_POOL so the event loop stays free). Every failure is a 400 naming the request's field and why;
whether the bytes are an image is hearth.media.images.prepare_image's to say."""

from __future__ import annotations

import base64
import binascii
import http.client
import ipaddress
import socket
import ssl
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http import HTTPStatus

from hearth.api.errors import APIError

MAX_IMAGE_BYTES = 20 * 2**20
"""Largest image taken, fetched or inline (OpenAI's limit per image)."""
FETCH_TIMEOUT_S = 10.0
"""Seconds an http(s) fetch may take, all told (a server that sends slowly is cut off too)."""
_FETCHED = ("http://", "https://")


def bad(field: str, why: str) -> APIError:
    return APIError(400, f"{field}: {why}", param=field)


def is_fetched(url: str) -> bool:
    return url.lower().startswith(_FETCHED)


def url_bytes(url: str, field: str) -> bytes | None:
    """A data URL's bytes; None for an http(s) URL (fetch it); any other scheme is a 400."""
    if not isinstance(url, str) or not url:
        raise bad(field, "required: a data:image/...;base64, URL or an http(s) URL")
    if is_fetched(url):
        return None
    if not url.lower().startswith("data:"):
        scheme = url.split(":", 1)[0] if ":" in url else url[:16]
        raise bad(field, f"unsupported URL scheme {scheme!r}: give a data:image/...;base64, URL or an http(s) URL")
    head, comma, payload = url.partition(",")
    kind = head[len("data:"):].split(";")
    if not comma or "base64" not in kind[1:]:
        raise bad(field, "a data URL must be base64: data:image/<type>;base64,<data>")
    if kind[0] and not kind[0].lower().startswith("image/"):
        raise bad(field, f"a data URL of {kind[0]!r} is not an image (expected image/<type>)")
    return b64_bytes(payload, field)


def b64_bytes(text: str, field: str) -> bytes:
    """Standard base64 (whitespace ignored, padding optional), capped at MAX_IMAGE_BYTES."""
    if not isinstance(text, str):
        raise bad(field, "must be a base64 string")
    text = "".join(text.split())
    if len(text) * 3 // 4 > MAX_IMAGE_BYTES:
        raise bad(field, f"image is larger than {MAX_IMAGE_BYTES} bytes")
    try:
        data = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError) as e:
        raise bad(field, f"invalid base64 data ({e})") from None
    if not data:
        raise bad(field, "image data is empty")
    return data


@dataclass(frozen=True, slots=True)
class FetchPolicy:
    """Where an http(s) image may be fetched from (the server's flags). By default any public address:
    loopback, private, link-local (cloud metadata, 169.254.169.254) and other non-global addresses are
    refused after DNS resolution and on every redirect, and the connection goes to the address checked
    (a second lookup cannot swap it)."""
    domains: tuple[str, ...] = ()
    """--allowed-media-domains (vLLM's): only these hosts, exactly (none: any host)."""
    private: bool = False
    """--allow-private-media-urls: non-global addresses too (an image server on the LAN or this machine)."""

    def address(self, host: str, port: int, url: str, field: str) -> str:
        """The address to connect to for `host`, checked: a 400 where the policy refuses it."""
        if self.domains and host.lower().rstrip(".") not in {d.lower().rstrip(".") for d in self.domains}:
            raise bad(field, f"fetching {url!r}: host {host!r} is not one of --allowed-media-domains")
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            raise bad(field, f"fetching {url!r} failed: cannot resolve host {host!r}") from None
        addresses = [info[4][0] for info in infos]
        if not self.private and any(_refused(a) for a in addresses):
            raise bad(field, f"fetching {url!r}: {host!r} is a loopback, private or link-local address "
                             "(the server allows them with --allow-private-media-urls)")
        return addresses[0]


USER_GIVEN = FetchPolicy(private=True)
"""A URL the user gave hearth themselves (`hearth run --image URL`, `/image URL`, LLM.chat): no one else's
request can aim it at this machine or its network, so loopback and LAN hosts are fetched, as vLLM's LLM.chat
does (its only check is allowed_media_domains, unset by default) and llama-mtmd-cli reads any local file. The
server's requests keep FetchPolicy()'s refusal (--allow-private-media-urls)."""


def _refused(address: str) -> bool:
    """Not a public unicast address (IPv4-mapped IPv6 read as the IPv4 it holds)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return not ip.is_global or ip.is_multicast


FETCH_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="hearth-media")
"""Where images are fetched and prepared: bounded, and apart from asyncio's default pool (model loads)."""
MAX_REDIRECTS = 5
_REDIRECTS = {301, 302, 303, 307, 308}


def fetch(url: str, field: str, policy: FetchPolicy = FetchPolicy()) -> bytes:
    """An http(s) URL's body (blocking: call it in FETCH_POOL), within FETCH_TIMEOUT_S all told. Redirects
    are followed only to http(s), each checked by `policy`; a body past MAX_IMAGE_BYTES is refused without
    reading the rest. An error never quotes what the peer sent (a 500 once echoed an SSH banner)."""
    deadline, target = time.monotonic() + FETCH_TIMEOUT_S, url  # errors name the client's url, not a Location
    try:
        for _ in range(MAX_REDIRECTS + 1):
            conn, response = _get(target, url, deadline, policy, field)
            with _Watchdog(conn, deadline):
                try:
                    location = response.getheader("Location")
                    if response.status in _REDIRECTS and location:
                        target = _redirected(target, location, url, field)
                        continue
                    if response.status != 200:
                        phrase = HTTPStatus(response.status).phrase if response.status in _STATUSES else ""
                        raise bad(field, f"fetching {url!r} failed: HTTP {response.status} {phrase}".rstrip())
                    return _body(conn.raw_sock, response, deadline, url, field)
                finally:
                    conn.close()
        raise bad(field, f"fetching {url!r} failed: more than {MAX_REDIRECTS} redirects")
    except APIError:
        raise
    except (OSError, http.client.HTTPException, ValueError) as e:  # TimeoutError is an OSError
        raise bad(field, f"fetching {url!r} failed: {_why(e, deadline)}") from None


def _why(e: Exception, deadline: float) -> str:
    """A failed fetch's reason, in hearth's words: never the peer's bytes (BadStatusLine quotes them)."""
    if isinstance(e, TimeoutError) or time.monotonic() >= deadline:  # or the watchdog shut the socket
        return "timed out"
    if isinstance(e, http.client.IncompleteRead):
        return "the response ended early"
    if isinstance(e, http.client.HTTPException):
        return "the server's answer is not a valid HTTP response"
    if isinstance(e, ssl.SSLError):  # a ValueError too, where the certificate fails
        return f"TLS: {getattr(e, 'reason', None) or type(e).__name__}"
    if isinstance(e, OSError):
        return e.strerror or type(e).__name__
    return "not a valid http(s) URL"  # urlsplit's ValueError


_STATUSES = {s.value for s in HTTPStatus}


def _get(target: str, url: str, deadline: float, policy: FetchPolicy, field: str):
    """(connection, response) of a GET of `target` (`url` or where it redirected), connected to the address
    `policy` checked."""
    parts = urllib.parse.urlsplit(target)
    host, tls = parts.hostname, parts.scheme.lower() == "https"
    if not host:
        raise bad(field, f"fetching {url!r} failed: the URL has no host")
    port = parts.port or (443 if tls else 80)
    address = policy.address(host, port, url, field)
    conn = (_PinnedHTTPS if tls else _PinnedHTTP)(host, port, timeout=_left(deadline))
    conn.address = address
    with _Watchdog(conn, deadline):
        conn.request("GET", (parts.path or "/") + (f"?{parts.query}" if parts.query else ""),
                     headers={"User-Agent": "hearth", "Accept": "image/*"})
        return conn, conn.getresponse()


def _redirected(target: str, location: str, url: str, field: str) -> str:
    new = urllib.parse.urljoin(target, location)
    if not is_fetched(new):
        raise bad(field, f"fetching {url!r} failed: redirected to a URL that is not http(s)")
    return new


def _body(sock, response, deadline: float, url: str, field: str) -> bytes:
    cap = MAX_IMAGE_BYTES
    size = response.getheader("Content-Length")
    if size is not None and size.isdigit() and int(size) > cap:
        raise bad(field, f"fetching {url!r}: the image is {size} bytes, more than the {cap} bytes allowed")
    chunks, got = [], 0
    while got <= cap:
        sock.settimeout(_left(deadline))
        chunk = response.read1(min(65536, cap + 1 - got))  # read1: one recv, so a trickle meets the deadline
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    _left(deadline)  # the watchdog's shutdown reads as the end of the body: past the deadline, it was not
    if size is not None and size.isdigit() and got < int(size):
        raise http.client.IncompleteRead(b"", int(size) - got)
    if got > cap:
        raise bad(field, f"fetching {url!r}: the image is more than the {cap} bytes allowed")
    if not got:
        raise bad(field, f"fetching {url!r}: the response is empty")
    return b"".join(chunks)


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    return left


class _Watchdog:
    """Shuts the connection's socket at the deadline: headers that trickle in reset no recv timeout."""

    def __init__(self, conn, deadline: float):
        self.timer = threading.Timer(max(0.0, deadline - time.monotonic()), self._shut, (conn,))
        self.timer.daemon = True

    @staticmethod
    def _shut(conn) -> None:
        if conn.raw_sock is not None:
            try:
                conn.raw_sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self):
        self.timer.start()

    def __exit__(self, *exc):
        self.timer.cancel()


class _PinnedHTTP(http.client.HTTPConnection):
    """Connects to `address` (the one FetchPolicy checked) while the Host header names the host. raw_sock
    outlives getresponse (which drops `sock` where the response will close the connection)."""
    address, raw_sock = "", None

    def connect(self):
        self.sock = self.raw_sock = socket.create_connection((self.address, self.port), self.timeout)


class _PinnedHTTPS(http.client.HTTPSConnection):
    address, raw_sock = "", None

    def connect(self):
        sock = socket.create_connection((self.address, self.port), self.timeout)
        self.sock = self.raw_sock = self._context.wrap_socket(sock, server_hostname=self.host)
