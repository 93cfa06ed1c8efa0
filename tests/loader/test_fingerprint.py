"""A model file's fingerprint (the root of the KV disk tier's hashes): the pinned SHA-256 of a
verified catalog file while it is unchanged, else a sample of its bytes that any header or size
change moves."""

from __future__ import annotations

import json
import os

from hearth.loader.fingerprint import HEAD, model_fingerprint
from hearth.loader.store import write_marker


def test_verified_file_is_named_by_its_sha256(tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF" + bytes(1000))
    write_marker(path, "ab" * 32)
    assert model_fingerprint(path) == "sha256:" + "ab" * 32
    os.utime(path, ns=(1, 1))  # touched since it was hashed: the marker no longer vouches for it
    assert model_fingerprint(path).startswith("sample:")


def test_sampled_fingerprint_follows_content(tmp_path):
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    data = bytearray(os.urandom(HEAD + (1 << 20)))
    a.write_bytes(bytes(data))
    b.write_bytes(bytes(data))
    assert model_fingerprint(a) == model_fingerprint(b)  # the name does not matter, the bytes do
    for at in (100, len(data) - 10):  # a header byte, a tail byte
        changed = bytearray(data)
        changed[at] ^= 1
        b.write_bytes(bytes(changed))
        assert model_fingerprint(a) != model_fingerprint(b)
    b.write_bytes(bytes(data) + b"x")
    assert model_fingerprint(a) != model_fingerprint(b)
    (tmp_path / "a.gguf.verified").write_text(json.dumps({"sha256": 5}))  # a malformed marker is ignored
    assert model_fingerprint(a).startswith("sample:")
