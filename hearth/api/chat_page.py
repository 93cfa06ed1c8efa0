"""The chat page: `/` and its assets under `/static/`, all served from hearth/api/static so the
page works with no network (no CDN). The files are read per request: small, and a page edit shows
on reload. Only the files listed here are served, each with its media type (ES modules need a
JavaScript one). The page's URLs are relative to a <base> at the ASGI root_path (--root-path): behind a
proxy that serves hearth under /llm, the page, its assets and its API calls all stay under /llm."""

from __future__ import annotations

import html
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import Response

from hearth.api.errors import APIError

STATIC = Path(__file__).parent / "static"
MEDIA_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
               ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
ASSETS = frozenset(p.name for p in STATIC.iterdir() if p.suffix in MEDIA_TYPES and p.name != "index.html")

router = APIRouter()


def _file(name: str, body: bytes | None = None) -> Response:
    return Response(body or (STATIC / name).read_bytes(), media_type=MEDIA_TYPES[Path(name).suffix],
                    headers={"Cache-Control": "no-cache"})


@router.get("/")
@router.get("/index.html")
async def chat_page(request: Request):
    # a base, not the request's URL: /llm (no slash) would resolve "static/app.js" to /static/app.js
    base = f'<head>\n<base href="{html.escape(request.scope.get("root_path", "").rstrip("/"))}/">'
    return _file("index.html", (STATIC / "index.html").read_text().replace("<head>", base, 1).encode())


@router.get("/static/{name}")
async def asset(name: str):
    if name not in ASSETS:
        raise APIError(404, f"no such file: /static/{name}", code="not_found")
    return _file(name)


@router.get("/favicon.ico")
async def favicon():
    return _file("favicon.svg")
