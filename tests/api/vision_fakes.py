"""A served model that takes images, around tests/server/fakes.py's scripted engine: a fake preparer (an
"image" is b"IMG" + its row count as one digit + anything), an engine that records each request's media,
and a local http server for fetched images."""

from __future__ import annotations

import base64
import hashlib
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

from starlette.testclient import TestClient

from hearth.api.app import ServerConfig, create_app
from hearth.api.media_fetch import FetchPolicy
from hearth.api.media_parts import Vision
from tests.server.fakes import TEMPLATE, FakeEngine, fake_served

BEFORE, AFTER, PLACEHOLDER = "<img>", "</img>", "\x01"
"""What the fake preparer puts around an image's rows, and the text of the id that fills them (id 1)."""


def image(rows: int, tag: bytes = b"") -> bytes:
    return b"IMG" + str(rows).encode() + tag


def data_url(data: bytes, kind: str = "image/png") -> str:
    return f"data:{kind};base64,{base64.b64encode(data).decode()}"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def fake_prepare(data: bytes) -> SimpleNamespace:
    """hearth.media.images.prepare_image's shape: PreparedImage's fields."""
    if not data.startswith(b"IMG") or not data[3:4].isdigit():
        raise ValueError("cannot identify image file")
    return SimpleNamespace(pixels=(data,), num_embeds=int(data[3:4]), befores=(BEFORE,), after=AFTER,
                           placeholder=PLACEHOLDER, bidirectional=data.endswith(b"bi"),
                           digests=(hashlib.sha256(data).digest(),),
                           grid=(1, int(data[3:4])) if data.endswith(b"grid") else None)  # qwen2vl's (rows, cols)


def digest(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


class MediaEngine(FakeEngine):
    """FakeEngine with add_request's `media`, recorded per request."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.media: list[tuple] = []

    def add_request(self, prompt_ids, params, request_id=None, media=()):
        self.media.append(tuple(media))
        for m in media:  # the engine's own check: the rows lie inside the prompt
            assert 0 <= m.offset and m.offset + m.length <= len(prompt_ids)
        return super().add_request(prompt_ids, params, request_id)


LOCAL = FetchPolicy(private=True)


def vision_client(vision: bool = True, template: str = TEMPLATE, max_images: int = 16, **engine_kw) -> tuple[TestClient, MediaEngine]:
    engine = MediaEngine(**engine_kw)
    served = fake_served(template, engine)
    if vision:
        # ImageServer listens on 127.0.0.1: a loopback address, allowed here as --allow-private-media-urls does
        served.vision = Vision(cfg=None, prepare=fake_prepare, path="mmproj.gguf", fetch_policy=LOCAL,
                              max_images=max_images)
    return TestClient(create_app(served, ServerConfig()), raise_server_exceptions=False), engine


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        """/slow's answer to a client that gave up (the fetch deadline's tests) fails with a broken pipe seconds
        later, in whatever test runs then: socketserver printed its traceback into that test's stderr."""


@dataclass
class ImageServer:
    """127.0.0.1, a free port: GET /NAME answers files[NAME] (a 1-tuple: a redirect to its URL; 404 where
    absent); /slow answers after 5 s."""
    files: dict

    def __enter__(self) -> ImageServer:
        files = self.files

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                body = files.get(self.path.lstrip("/"))
                if self.path == "/slow":
                    threading.Event().wait(5)
                if isinstance(body, tuple):  # (location,): a redirect there
                    self.send_response(302)
                    self.send_header("Location", body[0])
                    self.end_headers()
                    return
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "image/png")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = _QuietServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return self

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/{name}"

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()
