"""A tiny OpenAI-compatible streaming server for tests: stdlib http.server on a thread, answering
GET /health, GET /v1/models and POST /v1/chat/completions with a scripted SSE stream (chunked
HTTP/1.1, as uvicorn and llama-server send it), so TTFT and ITL can be checked against known delays.

`python -m tests.bench.fake_openai --port N --first S --gap S` runs one as a process, standing in
for a real server where a test starts servers as processes."""

from __future__ import annotations

import argparse
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def chat_chunk(text: str | None = None, finish: str | None = None) -> str:
    delta = {"content": text} if text is not None else {}
    return json.dumps({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta,
                                                                       "finish_reason": finish}]})


def usage_chunk(prompt: int, completion: int) -> str:
    return json.dumps({"object": "chat.completion.chunk", "choices": [],
                       "usage": {"prompt_tokens": prompt, "completion_tokens": completion}})


@dataclass
class Script:
    """What the server answers: `events` are (seconds to wait first, raw SSE text) pairs."""

    status: int = 200
    error_body: str = ""
    events: list[tuple[float, str]] = field(default_factory=list)
    models: list[str] = field(default_factory=lambda: ["fake-model"])


def stream_of(pieces: list[str], first_delay: float, gap: float, usage: tuple[int, int] | None = None) -> Script:
    events = [(first_delay if i == 0 else gap, f"data: {chat_chunk(p)}\n\n") for i, p in enumerate(pieces)]
    events.append((0.0, f"data: {chat_chunk(finish='length')}\n\n"))
    if usage:
        events.append((0.0, f"data: {usage_chunk(*usage)}\n\n"))
    events.append((0.0, "data: [DONE]\n\n"))
    return Script(events=events)


class FakeServer:
    def __init__(self, port: int = 0):
        self.script = Script()
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                if self.path == "/health":
                    return self._send(200, b'{"status": "ok"}')
                data = json.dumps({"object": "list", "data": [{"id": m} for m in server.script.models]}).encode()
                self._send(200 if self.path == "/v1/models" else 404, data)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.bodies.append(body)
                server.headers.append(dict(self.headers))
                s = server.script
                if s.status != 200:
                    return self._send(s.status, s.error_body.encode())
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for delay, text in s.events:
                    time.sleep(delay)
                    raw = text.encode()
                    self.wfile.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.close_connection = True

            def _send(self, status, data):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--first", type=float, default=0.01, help="seconds before the first token")
    ap.add_argument("--gap", type=float, default=0.005, help="seconds between tokens")
    opts, _ = ap.parse_known_args()  # a real server's other flags are ignored
    fake = FakeServer(opts.port)
    fake.script = stream_of(["one", " two", " three", " four"], opts.first, opts.gap, usage=(12, 4))
    fake.httpd.serve_forever()
