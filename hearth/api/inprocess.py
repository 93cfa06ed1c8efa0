"""One HTTP request to the app in this process, through ASGI itself: no socket, and every route's own
checks, templates, tool layer and errors, as a client over HTTP would get them (`hearth run-batch`)."""

from __future__ import annotations

import asyncio
import json


async def post(app, path: str, body: dict) -> tuple[int, dict]:
    """POST body as JSON to path -> (status, the JSON answer). A streamed answer is read to its end
    (the caller asks for whole ones)."""
    data = json.dumps(body).encode()
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"host", b"hearth"), (b"content-type", b"application/json"),
                         (b"content-length", str(len(data)).encode())],
             "client": ("127.0.0.1", 0), "server": ("hearth", 0)}
    sent, done = [], asyncio.Event()
    status = 500
    request = [{"type": "http.request", "body": data, "more_body": False}]

    async def receive() -> dict:
        if request:
            return request.pop()
        await done.wait()  # a disconnect only once the answer is whole, as a patient client
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            sent.append(message.get("body", b""))
            if not message.get("more_body", False):
                done.set()

    await app(scope, receive, send)
    done.set()
    text = b"".join(sent)
    try:
        return status, json.loads(text)
    except ValueError:  # not JSON (no route of the app's answers so): the text as an error's message
        return status, {"error": {"message": text.decode(errors="replace"), "type": "server_error"}}
