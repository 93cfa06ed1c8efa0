"""`hearth serve --kv-disk-dir`: killed (SIGKILL) while it writes KV blocks, with files then
damaged on purpose, a restarted server loads only intact blocks (the damaged ones are counted as
corrupt and recomputed) and answers as a cold server does; a conversation saved through /slots/save
comes back in another server through /slots/restore without prefill. Names cannot leave the
directory, and the routes need the API key."""

from __future__ import annotations

import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx2
import pytest

from hearth.kvstore.block_hash import chain_hashes, root_hash
from hearth.kvstore.disk import MAGIC, SUFFIX
from hearth.kvstore.disk_format import BlockFormat, verify
from hearth.loader.fingerprint import model_fingerprint
from tests.server.conftest import RealServer, launch, stop
from tests.server.test_real_server import metrics

LOGPROB_TOL = 0.5  # as tests/test_engine_equivalence.py: a cache hit may break a near-tie
ANIMALS = ["fox", "heron", "badger", "otter"]
PLACES = ["mill", "harbour", "old bridge", "orchard", "chapel", "market"]
# SmolLM2's f16 blocks: 30 layers x [2, 16 tokens, 3 kv heads, 64] x 2 bytes
SMOLLM2_F16 = BlockFormat("f16", 16, 30, (30 * 2 * 16 * 3 * 64 * 2,))
CHAT = [{"role": "system", "content": "You answer in one sentence. " * 8},
        {"role": "user", "content": "What does a lighthouse keeper do all night?"}]


def text(i: int) -> str:
    return f"Field notes, volume {i}. " + " ".join(
        f"On day {d} the {ANIMALS[i]} walked {d * (i + 2)} miles to the {PLACES[(d + i) % 6]}." for d in range(1, 23))


@dataclass
class Restarted:
    server: RealServer
    dir: Path
    prompts: list[list[int]]
    hashes: list[list[bytes]]


def _launch(model_path, tmp_path_factory, kv_dir: Path, tag: str):
    log = tmp_path_factory.mktemp(tag) / "server.log"
    return launch(model_path("smollm2-135m"), log, "--kv-disk-dir", str(kv_dir), "--max-model-len", "1024")


def _block_file(kv_dir: Path, h: bytes) -> Path:
    return kv_dir / "blocks" / f"{h.hex()}{SUFFIX}"


@pytest.fixture(scope="module")
def restarted(model_path, tmp_path_factory, real_server):
    http = real_server.http()
    prompts = [http.post("/tokenize", json={"prompt": text(i)}).json()["tokens"] for i in range(4)]
    root = root_hash(f"{model_fingerprint(model_path('smollm2-135m'))}|f16|16".encode())
    hashes = [chain_hashes(root, ids, 16) for ids in prompts]
    kv_dir = tmp_path_factory.mktemp("kv")
    proc, a = _launch(model_path, tmp_path_factory, kv_dir, "a")
    try:
        client = a.openai()
        pool = ThreadPoolExecutor(4)
        for ids in prompts:  # their blocks are written while they decode
            pool.submit(client.completions.create, model=a.model, prompt=ids, max_tokens=64, temperature=0)
        wanted = [_block_file(kv_dir, hashes[0][0]), _block_file(kv_dir, hashes[1][0]), _block_file(kv_dir, hashes[1][1])]
        deadline = time.monotonic() + 120
        while not all(p.exists() for p in wanted) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert all(p.exists() for p in wanted), a.log.read_text()
        proc.kill()  # SIGKILL: no shutdown, writes cut wherever they are
        proc.wait()
        pool.shutdown(wait=True)
    finally:
        stop(proc)
    wanted[0].write_bytes(wanted[0].read_bytes()[:5000])  # prompt 0, block 0: truncated
    data = bytearray(wanted[2].read_bytes())
    data[len(data) // 2] ^= 0x10  # prompt 1, block 1: one bit flipped
    wanted[2].write_bytes(bytes(data))
    dead = proc.pid
    leftover = kv_dir / "blocks" / f"{hashes[3][5].hex()}{SUFFIX}.{dead}.cut.tmp"
    leftover.write_bytes(b"half a block")  # what a write cut by the kill leaves
    proc, b = _launch(model_path, tmp_path_factory, kv_dir, "b")
    try:
        assert not list((kv_dir / "blocks").glob(f"*.{dead}.*.tmp"))  # removed at start
        yield Restarted(b, kv_dir, prompts, hashes)
    finally:
        stop(proc)


def _complete(server: RealServer, ids: list[int]):
    r = server.openai().completions.create(model=server.model, prompt=ids, max_tokens=8, temperature=0, logprobs=5)
    return r.choices[0].logprobs, r.usage.prompt_tokens_details.cached_tokens


def _agree(got, want) -> None:
    """Same tokens, or parted at a near-tie (both tokens' logprobs within LOGPROB_TOL in both runs)."""
    k = next((i for i, (a, b) in enumerate(zip(got.tokens, want.tokens)) if a != b), None)
    for i in range(len(want.tokens) if k is None else k):
        assert abs(got.token_logprobs[i] - want.token_logprobs[i]) <= LOGPROB_TOL, (i, got.tokens[i])
    if k is not None:
        for t in (got.tokens[k], want.tokens[k]):
            a, b = got.top_logprobs[k].get(t), want.top_logprobs[k].get(t)
            assert a is not None and b is not None and abs(a - b) <= LOGPROB_TOL, (k, got.tokens, want.tokens)


def test_restart_after_kill_uses_only_intact_blocks(restarted, real_server):
    b, r = restarted.server, restarted
    with ThreadPoolExecutor(8) as pool:
        warm = list(pool.map(lambda ids: _complete(b, ids), r.prompts))
        cold = list(pool.map(lambda ids: _complete(real_server, ids), r.prompts))
    for (got, _), (want, _) in zip(warm, cold):
        _agree(got, want)
    cached = [c for _, c in warm]
    assert cached[0] == 0 and cached[1] == 16  # stopped at the damaged block
    m = metrics(b.http())
    assert m["hearth:kv_disk_corrupt_files_total"] == 2
    assert m["hearth:prefix_cache_disk_hits_total"] == sum(cached)
    for h in (r.hashes[0][0], r.hashes[1][1]):  # recomputed and written again, whole this time
        path = _block_file(r.dir, h)
        deadline = time.monotonic() + 60
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        verify(path.read_bytes(), MAGIC, SMOLLM2_F16, h)


def test_save_and_restore_a_conversation(restarted, model_path, tmp_path_factory):
    b = restarted.server
    http = b.http()
    saved = http.post("/slots/save", json={"name": "lighthouse-1", "messages": CHAT})
    assert saved.status_code == 200, saved.text
    body = saved.json()
    n = len(http.post("/tokenize", json={"messages": CHAT}).json()["tokens"])
    assert body["n_saved"] == n // 16 * 16 > 0 and body["filename"] == "lighthouse-1.hkv"
    before = b.openai().chat.completions.create(model=b.model, messages=CHAT, max_tokens=8, temperature=0)
    fresh = tmp_path_factory.mktemp("kv2")
    (fresh / "saved").mkdir()
    shutil.copy(restarted.dir / "saved" / "lighthouse-1.hkv", fresh / "saved")
    proc, c = _launch(model_path, tmp_path_factory, fresh, "c")
    try:
        http = c.http()
        assert http.post("/slots/restore", json={"name": "missing"}).status_code == 404
        r = http.post("/slots/0?action=restore", json={"filename": "lighthouse-1"})  # llama-server's shape
        assert r.status_code == 200, r.text
        assert r.json()["n_restored"] == body["n_saved"]
        after = c.openai().chat.completions.create(model=c.model, messages=CHAT, max_tokens=8, temperature=0)
        assert after.usage.prompt_tokens_details.cached_tokens == (n - 1) // 16 * 16
        assert after.choices[0].message.content == before.choices[0].message.content
    finally:
        stop(proc)


@pytest.mark.parametrize("field,name", [("name", "../../etc/passwd"), ("name", "a/b"), ("name", ".hidden"),
                                        ("name", ""), ("name", "x" * 200), ("filename", "/tmp/x"),
                                        ("filename", "..")])
def test_names_that_leave_the_directory_are_400(restarted, field, name):
    r = restarted.server.http().post("/slots/save", json={field: name, "prompt": "hello"})
    assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text
    assert r.json()["error"]["message"].startswith(f"{field}: {name!r} must be "), r.text
    assert {p.name for p in (restarted.dir / "saved").iterdir()} <= {"lighthouse-1.hkv"}


def test_slots_need_the_api_key(restarted):
    url = restarted.server.url
    for path in ("/slots/save", "/slots/restore", "/slots/0?action=save"):
        assert httpx2.post(f"{url}{path}", json={"name": "x", "prompt": "hi"}).status_code == 401
        assert httpx2.post(f"{url}{path}", json={"name": "x", "prompt": "hi"},
                           headers={"Authorization": "Bearer wrong"}).status_code == 401


def test_slots_without_a_disk_dir_say_which_flag(real_server):
    r = real_server.http().post("/slots/save", json={"name": "x", "prompt": "hi"})
    assert r.status_code == 400 and "--kv-disk-dir" in r.json()["error"]["message"]
