"""CORS: which browser pages may call the server. By default, as Ollama's OLLAMA_ORIGINS default: pages served
from this machine (http or https on localhost, 127.0.0.1, 0.0.0.0 or [::1], any port) and desktop apps'
schemes (app://, file://, tauri://, vscode-webview://, vscode-file://); a page on any other origin must be let
in with --cors-origins (added to those, as OLLAMA_ORIGINS adds to its; '*': any). hearth listens on 127.0.0.1,
and a web page the user merely visits must not drive it without their consent; a page on localhost is served
from the machine itself (a local UI in development, Open WebUI on its default port).

A preflight from an origin not let in is a 403 that names the flag (Starlette's answer is a bare "Disallowed CORS
origin"; with no CORS at all it was a 405 that said nothing of CORS)."""

from __future__ import annotations

import json

from fastapi.middleware.cors import CORSMiddleware
from starlette.datastructures import Headers
from starlette.responses import Response

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
        message = (f"CORS: origin {origin!r} may not call this server from a browser; start it with --cors-origins "
                   f"{origin} (comma-separated, '*' for any) to let it in (pages on localhost and 127.0.0.1 are let "
                   "in by default)")
        body = error_body("", 403, message)
        return Response(json.dumps(body), status_code=403, media_type="application/json",
                        headers={"Vary": "Origin"})
