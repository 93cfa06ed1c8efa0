"""The byte format of KV files on disk, and how they are written (atomically) and checked.

A file is a fixed header, a payload and a blake2b checksum of both. The header says what the payload
is (magic, version, KV codec, block size, layer count, its length and the key it was written
under), so a file read under another model, format or name, a truncated file or one with a flipped
bit is rejected before any byte of it reaches the KV cache. Writes go to a temporary file in the
same directory, are fsynced, then renamed over the final name: a reader sees the whole file or none
(a crash mid-write leaves only a temporary file). Torch-free: the engine's thread reads these."""

from __future__ import annotations

import hashlib
import os
import struct
from dataclasses import dataclass
from pathlib import Path

VERSION = 1
CHECKSUM = 16
# magic, version, flags, block_size, num_layers, payload length, codec name, key (block hash / root)
HEADER = struct.Struct("<4sHHIIQ24s16s")


class CorruptFileError(ValueError):
    """A KV file that fails validation; the message says why (it is logged, the file deleted)."""


@dataclass(frozen=True, slots=True)
class BlockFormat:
    """What every block payload of one cache looks like."""

    codec: str
    block_size: int
    num_layers: int
    payload_sizes: tuple[int, ...]
    """Valid payload lengths: a block's bytes, all layers (KVarN's first block may carry its f16 copy)."""

    @property
    def block_bytes(self) -> int:
        return self.payload_sizes[0]


def header(magic: bytes, fmt: BlockFormat, key: bytes, payload_len: int, flags: int = 0) -> bytes:
    return HEADER.pack(magic, VERSION, flags, fmt.block_size, fmt.num_layers, payload_len,
                       fmt.codec.encode()[:24], key)


def write_atomic(path: Path, chunks: list[bytes | memoryview], fsync: bool = True) -> int:
    """Write header+payload chunks and their checksum to path via temp file + rename; returns bytes."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{id(chunks):x}.tmp")
    check = hashlib.blake2b(digest_size=CHECKSUM)
    size = 0
    try:
        with open(tmp, "wb") as f:
            for chunk in chunks:
                check.update(chunk)
                f.write(chunk)
                size += len(chunk)
            f.write(check.digest())
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return size + CHECKSUM


def verify(data: bytes, magic: bytes, fmt: BlockFormat, key: bytes | None) -> tuple[int, int, memoryview]:
    """(flags, payload length, body after the header) of a whole file's bytes, or CorruptFileError.
    key None: any key (the caller checks it)."""
    if len(data) < HEADER.size + CHECKSUM:
        raise CorruptFileError(f"{len(data)} bytes is shorter than a header")
    got_magic, version, flags, bs, layers, n, codec, got_key = HEADER.unpack_from(data)
    if got_magic != magic or version != VERSION:
        raise CorruptFileError(f"not a version-{VERSION} {magic.decode()} file")
    codec = codec.rstrip(b"\0").decode(errors="replace")
    if (codec, bs, layers) != (fmt.codec, fmt.block_size, fmt.num_layers):
        raise CorruptFileError(f"written for {codec!r} KV, block size {bs}, {layers} layers")
    if key is not None and got_key != key:
        raise CorruptFileError("written under another key")
    if len(data) != HEADER.size + n + CHECKSUM:
        raise CorruptFileError(f"{len(data)} bytes, the header promises {HEADER.size + n + CHECKSUM} (truncated?)")
    view = memoryview(data)
    if hashlib.blake2b(view[:-CHECKSUM], digest_size=CHECKSUM).digest() != view[-CHECKSUM:]:
        raise CorruptFileError("checksum mismatch")
    return flags, n, view[HEADER.size:-CHECKSUM]


def header_key(data: bytes) -> bytes:
    return HEADER.unpack_from(data)[7]
