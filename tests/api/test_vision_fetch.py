"""Fetched images: every failure is a 400 naming the field that quotes nothing the peer sent, the timeout
holds all told (a trickle too), fetches run in their own bounded pool, and loopback/private/link-local
addresses are refused (after DNS, on every redirect) unless the server allows them."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from starlette.testclient import TestClient

from hearth.api import media_fetch, media_parts
from hearth.api.app import ServerConfig, create_app
from hearth.api.errors import APIError
from hearth.api.media_fetch import FetchPolicy, fetch
from hearth.api.media_parts import ImagePart, RequestImages, Vision
from hearth.api.model_pool import ModelPool
from tests.api.vision_fakes import LOCAL, ImageServer, MediaEngine, data_url, fake_prepare, image, vision_client
from tests.server.fakes import fake_served

FIELD = "messages[0].content[0].image_url.url"


def serve_once(payload: bytes) -> str:
    """A URL whose server answers `payload` to one request, then hangs up."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)

    def run():
        c, _ = s.accept()
        c.recv(65536)
        c.sendall(payload)
        c.close()
        s.close()
    threading.Thread(target=run, daemon=True).start()
    return f"http://127.0.0.1:{s.getsockname()[1]}/a.png"


def chat_image(client, url):
    return client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": url}}]}]})


@pytest.mark.parametrize("payload,why", [
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nabc", "the response ended early"),
    (b"HTTP/1.0 200 OK\r\nContent-Length: 100\r\n\r\nabc", "the response ended early"),
    (b"SSH-2.0-OpenSSH_9.6\r\n", "not a valid HTTP response"),
])
def test_a_broken_reply_is_a_400_that_quotes_nothing_it_read(payload, why):
    with pytest.raises(APIError) as e:
        fetch(serve_once(payload), FIELD, LOCAL)
    assert e.value.status == 400 and why in str(e.value) and "SSH" not in str(e.value)
    client, _ = vision_client()
    with client:
        r = chat_image(client, serve_once(payload))
    assert r.status_code == 400 and r.json()["error"]["param"] == FIELD and "SSH" not in r.text, r.text


def test_any_surprise_of_a_fetch_is_a_400_naming_the_field(monkeypatch):
    def boom(*a):
        raise RuntimeError("peer bytes")
    monkeypatch.setattr(media_parts, "fetch", boom)
    images = RequestImages(Vision(None, fake_prepare))
    with pytest.raises(APIError) as e:
        images.load_now(ImagePart(FIELD, url="http://example.com/a.png"))
    assert e.value.status == 400 and FIELD in str(e.value) and "peer bytes" not in str(e.value)


class Drip(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "16")
        self.end_headers()
        for _ in range(16):
            self.wfile.write(b"x")
            self.wfile.flush()
            time.sleep(0.2)

    def log_message(self, *a):
        pass


def test_a_trickle_is_cut_at_the_deadline(monkeypatch):
    monkeypatch.setattr(media_fetch, "FETCH_TIMEOUT_S", 0.5)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Drip)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    t0 = time.monotonic()
    try:
        with pytest.raises(APIError, match="timed out"):
            fetch(f"http://127.0.0.1:{server.server_port}/a.png", FIELD, LOCAL)
    finally:
        server.shutdown()
        server.server_close()
    assert time.monotonic() - t0 < 1.5  # 16 bytes at 0.2 s each took 3.2 s


def test_fetches_run_in_their_own_pool():
    seen = []
    vision = Vision(None, lambda data: seen.append(threading.current_thread().name) or fake_prepare(data),
                    fetch_policy=LOCAL)
    images = RequestImages(vision)
    with ImageServer({"a.png": image(1)}) as site:
        images.add_url(FIELD, site.url("a.png"))
        asyncio.run(images.load())
    assert seen and seen[0].startswith("hearth-media")


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/a.png", "http://169.254.169.254/latest/meta-data/",
                                 "http://[::1]:9/a.png", "http://[::ffff:10.0.0.1]:9/a.png", "http://localhost:9/a"])
def test_private_addresses_are_refused_by_default(url):
    with pytest.raises(APIError, match="--allow-private-media-urls"):
        fetch(url, FIELD)


def test_a_redirect_to_a_private_address_is_refused(monkeypatch):
    monkeypatch.setattr(media_fetch, "_refused", lambda a: a != "127.0.0.1")  # 127.0.0.1 plays a public host
    with ImageServer({"a.png": image(1), "moved": ("http://127.0.0.2:9/a.png",)}) as site:
        assert fetch(site.url("a.png"), FIELD) == image(1)
        with pytest.raises(APIError, match="127.0.0.2.*--allow-private-media-urls") as e:
            fetch(site.url("moved"), FIELD)
    assert "/moved" in str(e.value) and ":9/a.png" not in str(e.value)  # the client's URL, not the Location


def test_allowed_media_domains_hold_on_every_redirect():
    policy = FetchPolicy(domains=("127.0.0.1",), private=True)
    with ImageServer({"a.png": image(1), "moved": ("http://localhost:9/a.png",)}) as site:
        assert fetch(site.url("a.png"), FIELD, policy) == image(1)
        with pytest.raises(APIError, match="'localhost' is not one of --allowed-media-domains"):
            fetch(site.url("moved"), FIELD, policy)


def test_the_route_refuses_a_loopback_url_by_default():
    engine = MediaEngine()
    served = fake_served(engine=engine)
    served.vision = Vision(None, fake_prepare)
    with ImageServer({"a.png": image(1)}) as site, TestClient(create_app(served, ServerConfig())) as client:
        r = chat_image(client, site.url("a.png"))
    assert r.status_code == 400 and "--allow-private-media-urls" in r.json()["error"]["message"], r.text
    assert r.json()["error"]["param"] == FIELD and not engine.added


def test_a_responses_follow_up_asked_of_a_text_model_is_a_400():
    main, small = MediaEngine(), MediaEngine()
    served = fake_served(engine=main, names=("main",))
    served.vision = Vision(None, fake_prepare)
    pool = ModelPool.of([served, fake_served(engine=small, names=("small",))], {})
    with TestClient(create_app(pool, ServerConfig()), raise_server_exceptions=False) as client:
        first = client.post("/v1/responses", json={"model": "main", "input": [{"role": "user", "content": [
            {"type": "input_image", "image_url": data_url(image(2))}, {"type": "input_text", "text": "hi"}]}]})
        assert first.status_code == 200, first.text
        r = client.post("/v1/responses", json={"model": "small", "previous_response_id": first.json()["id"],
                                               "input": "and now?"})
    assert r.status_code == 400 and "--mmproj" in r.text, r.text


def test_a_certificate_failure_reads_as_tls_not_as_a_bad_url():
    """ssl.SSLCertVerificationError is a ValueError too (urlsplit's kind): checked first."""
    why = media_fetch._why(ssl.SSLCertVerificationError(1, "certificate verify failed"), time.monotonic() + 60)
    assert why.startswith("TLS: ")
