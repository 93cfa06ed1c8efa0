"""An image's bytes from where a request put them: a `data:image/...;base64,` URL or bare base64 (decoded
here), or an http(s) URL (fetched with the standard library, a timeout and a size cap; the routes run it
in a thread so the event loop stays free). Every failure is a 400 naming the request's field and why;
whether the bytes are an image is hearth.media.images.prepare_image's to say."""

from __future__ import annotations

import base64
import binascii
import time
import urllib.error
import urllib.request

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
        raise bad(field, "must be a non-empty string: a data:image/...;base64, URL or an http(s) URL")
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


def fetch(url: str, field: str) -> bytes:
    """An http(s) URL's body (blocking: call it in a thread). Redirects are followed only to http(s);
    a body past MAX_IMAGE_BYTES is refused without reading the rest."""
    timeout, cap = FETCH_TIMEOUT_S, MAX_IMAGE_BYTES
    request = urllib.request.Request(url, headers={"User-Agent": "hearth", "Accept": "image/*"})
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            size = response.headers.get("Content-Length")
            if size is not None and size.isdigit() and int(size) > cap:
                raise bad(field, f"fetching {url!r}: the image is {size} bytes, more than the {cap} bytes allowed")
            data = _read(response, cap + 1, time.monotonic() + timeout, url, field)
    except urllib.error.HTTPError as e:
        raise bad(field, f"fetching {url!r} failed: HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise bad(field, f"fetching {url!r} failed: {getattr(e, 'reason', e)}") from None
    if len(data) > cap:
        raise bad(field, f"fetching {url!r}: the image is more than the {cap} bytes allowed")
    if not data:
        raise bad(field, f"fetching {url!r}: the response is empty")
    return data


class _HttpRedirects(urllib.request.HTTPRedirectHandler):
    """urllib's redirects, to http(s) only (its own rule lets ftp through)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if not is_fetched(newurl):
            raise urllib.error.HTTPError(newurl, code, f"redirected to a URL that is not http(s): {newurl!r}",
                                         headers, fp)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_OPENER = urllib.request.OpenerDirector()
for _handler in (urllib.request.ProxyHandler(), urllib.request.HTTPHandler(), urllib.request.HTTPSHandler(),
                 urllib.request.HTTPDefaultErrorHandler(), _HttpRedirects(), urllib.request.HTTPErrorProcessor()):
    _OPENER.add_handler(_handler)


def _read(response, most: int, deadline: float, url: str, field: str) -> bytes:
    chunks, got = [], 0
    while got < most:
        if time.monotonic() > deadline:
            raise bad(field, f"fetching {url!r} failed: timed out")
        chunk = response.read(min(65536, most - got))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)
