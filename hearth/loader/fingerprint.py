"""What identifies a model file's content, for cache keys that outlive the process (the KV disk
tier): equal fingerprints must mean equal weights, tokenizer and metadata.

A file `hearth pull` verified carries its SHA-256 in a marker (valid while size and mtime match):
that is used. Any other file is fingerprinted without reading it whole, since hashing a multi-GB
file at every start would cost seconds: its size, its first HEAD bytes (the GGUF header: metadata,
tokenizer, tensor table, the start of the data), its last TAIL bytes and SAMPLES evenly spaced
chunks. An edit of a weight in between that keeps the size would go unseen; re-quantizing,
converting or renaming tensors changes the header or size."""

from __future__ import annotations

import hashlib
from pathlib import Path

from hearth.loader.store import marker_sha256

HEAD = 8 << 20
TAIL = 4 << 20
SAMPLES, SAMPLE = 64, 64 << 10


def model_fingerprint(path: Path) -> str:
    sha = marker_sha256(path)
    if sha is not None:
        return f"sha256:{sha}"
    size = path.stat().st_size
    h = hashlib.blake2b(str(size).encode(), digest_size=16)
    with open(path, "rb") as f:
        h.update(f.read(HEAD))
        for i in range(SAMPLES):
            f.seek(size * i // SAMPLES)
            h.update(f.read(SAMPLE))
        f.seek(max(0, size - TAIL))
        h.update(f.read(TAIL))
    return f"sample:{h.hexdigest()}"
