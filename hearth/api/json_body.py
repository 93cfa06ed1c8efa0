"""Request bodies are read as JSON whatever their Content-Type says, as llama-server and Ollama read
them: `curl -d '{...}'` sends application/x-www-form-urlencoded, and scripts written for those servers
often send no type at all. FastAPI would hand such a body to the request model as bytes (a 400
that blames the client's header); here its Content-Type is taken as JSON, so a JSON object is served
and anything else is a 400 naming the JSON error. Every route's body is a JSON model: nothing here
takes forms or files."""

from __future__ import annotations

from email.message import Message as MimeHeader

from starlette.types import ASGIApp, Receive, Scope, Send

JSON = (b"content-type", b"application/json")


def _is_json(value: bytes) -> bool:
    header = MimeHeader()
    header["content-type"] = value.decode("latin-1")
    subtype = header.get_content_subtype()
    return header.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json"))


class JSONBodyMiddleware:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            given = [v for k, v in scope["headers"] if k == b"content-type"]
            if not given or not _is_json(given[0]):  # none given: FastAPI's strict content type refuses it too
                scope = {**scope, "headers": [(k, v) for k, v in scope["headers"] if k != b"content-type"] + [JSON]}
        await self.app(scope, receive, send)
