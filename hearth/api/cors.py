"""CORS: which browser pages may call the server. By default, as Ollama's OLLAMA_ORIGINS default: pages served
from this machine (http or https on localhost, 127.0.0.1, 0.0.0.0 or [::1], any port) and desktop apps'
schemes (app://, file://, tauri://, vscode-webview://, vscode-file://); a page on any other origin must be let
in with --cors-origins (added to those, as OLLAMA_ORIGINS adds to its; '*': any). hearth listens on 127.0.0.1,
and a web page the user merely visits must not drive it without their consent; a page on localhost is served
from the machine itself (a local UI in development, Open WebUI on its default port).

A preflight from an origin not let in is a 403 that names the flag (Starlette's answer is a bare "Disallowed CORS
origin"; with no CORS at all it was a 405 that said nothing of CORS). So is any other request such a page sends:
a cross-origin POST with a text/plain body needs no preflight, and hearth reads every body as JSON
(hearth.api.json_body), so without this check any site could make the user's server generate. A request from the
server's own pages (its Origin names the address it was sent to) and one with no Origin (curl, the SDKs) pass."""

from __future__ import annotations

import ipaddress
import json
from urllib.parse import urlsplit

from fastapi.middleware.cors import CORSMiddleware
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from hearth.api.errors import error_body

LOCAL_ORIGINS = (r"https?://(localhost|127\.0\.0\.1|0\.0\.0\.0|\[::1\])(:\d+)?"
                 r"|(app|file|tauri|vscode-webview|vscode-file)://.*")
"""Origins let in without --cors-origins (matched whole)."""


class Cors(CORSMiddleware):
    """Starlette's CORS with the local origins always in; a refused preflight says why and what to do."""

    def __init__(self, app, origins: list[str], expose_headers: list[str]):
        super().__init__(app, allow_origins=origins, allow_origin_regex=LOCAL_ORIGINS, allow_methods=["*"],
                         allow_headers=["*"], allow_credentials="*" not in origins, expose_headers=expose_headers)

    def preflight_response(self, request_headers: Headers) -> Response:
        origin = request_headers["origin"]
        if self.is_allowed_origin(origin):
            return super().preflight_response(request_headers)
        return _refused(origin)

    async def simple_response(self, scope: Scope, receive: Receive, send: Send, request_headers: Headers) -> None:
        origin = request_headers.get("origin")
        if origin is None or self.is_allowed_origin(origin) or _same_origin(origin, request_headers.get("host")):
            await super().simple_response(scope, receive, send, request_headers)
        else:
            await _refused(origin)(scope, receive, send)


def _same_origin(origin: str, host: str | None) -> bool:
    """The page was served by this server (its chat page, reached at a LAN address with --host 0.0.0.0). Only at an
    address: a page of evil.example whose name an attacker re-points at 127.0.0.1 (DNS rebinding) is same-origin
    with what it reaches by that name, so a name other than localhost must be let in with --cors-origins."""
    if host is None or urlsplit(origin).netloc != host:
        return False
    name = urlsplit(origin).hostname or ""
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return name == "localhost"
    return True


def _refused(origin: str) -> Response:
    message = (f"CORS: origin {origin!r} may not call this server from a browser; start it with --cors-origins "
               f"{origin} (comma-separated, '*' for any) to let it in (pages on localhost and 127.0.0.1 are let "
               "in by default)")
    return Response(json.dumps(error_body("", 403, message)), status_code=403, media_type="application/json",
                    headers={"Vary": "Origin"})
