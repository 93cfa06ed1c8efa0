"""The chained hash that names a full KV block, in memory (the prefix cache) and on disk.

hash(block i) = blake2b(hash(block i - 1), its token ids[, the digests of the images among them]);
block 0's parent is the cache's root, itself a hash of what makes K/V reusable (model file content,
KV format, block size). Equal hashes mean equal K/V, in this process or in a file written by another
one. Plain Python, no torch."""

from __future__ import annotations

import hashlib
from array import array

DIGEST = 16
"""Bytes of a block hash (and of the root)."""


def root_hash(cache_key: bytes) -> bytes:
    return hashlib.blake2b(cache_key, digest_size=DIGEST).digest()


def hash_block(parent: bytes, token_ids: list[int], media: bytes = b"") -> bytes:
    """media: what the image rows among these positions add (hearth.engine.media_spans.block_salt): their
    K/V follow the image, not the placeholder ids; b"" for a text block (its hash as before)."""
    h = hashlib.blake2b(parent, digest_size=DIGEST)
    h.update(array("i", token_ids).tobytes())
    if media:
        h.update(b"|media:" + media)
    return h.digest()


def chain_hashes(root: bytes, token_ids: list[int], block_size: int) -> list[bytes]:
    """The hashes of every full block of token_ids, in order."""
    hashes, parent = [], root
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash_block(parent, token_ids[start:start + block_size])
        hashes.append(parent)
    return hashes
