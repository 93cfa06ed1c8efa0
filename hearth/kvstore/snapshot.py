"""Named snapshots of a conversation's KV state (the server's /slots save and restore, as
llama-server's): `<kv-disk-dir>/saved/<name>.hkv` holds the conversation's token ids and the
payloads of its full blocks, in the disk tier's file format (header, body, checksum; written
atomically). Restoring checks the file, recomputes each block's chained hash from the saved tokens
under this cache's root (so a snapshot of another model or KV format is refused, not loaded) and
puts the blocks in the disk tier, where the next request with that prefix finds them.

Names are confined to the directory: ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$ (no separators, no leading
dot), and the resolved path must still sit in it. Torch-free."""

from __future__ import annotations

import os
import re
import struct
from array import array
from dataclasses import dataclass
from pathlib import Path

from hearth.errors import HearthError
from hearth.kvstore.block_hash import chain_hashes
from hearth.kvstore.disk import DiskKVStore
from hearth.kvstore.disk_format import CorruptFileError, header, header_key, verify, write_atomic

MAGIC = b"HKVS"
SUFFIX = ".hkv"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
COUNTS = struct.Struct("<II")  # number of tokens, number of blocks
LENGTH = struct.Struct("<Q")  # before each block payload


class SnapshotError(HearthError):
    """A snapshot that cannot be saved or restored; the message says why."""


class SnapshotNameError(SnapshotError):
    """A name that is not a plain file name inside the snapshot directory."""


class SnapshotNotFoundError(SnapshotError):
    pass


def check_name(name: str) -> None:
    """A snapshot's name is a plain file name (no store needed: the server checks it before loading a model)."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise SnapshotNameError(f"{name!r} must be 1-128 letters, digits, '.', '_' or '-', starting with a letter "
                                "or digit")


@dataclass(slots=True)
class SnapshotInfo:
    name: str
    path: Path
    num_tokens: int
    """Tokens whose K/V the snapshot holds (its full blocks)."""
    num_bytes: int


class SnapshotStore:
    def __init__(self, directory: str | os.PathLike, root: bytes, disk: DiskKVStore):
        self.dir = Path(directory) / "saved"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.root, self.disk, self.fmt = root, disk, disk.fmt

    def path(self, name: str) -> Path:
        check_name(name)
        path = (self.dir / f"{name}{SUFFIX}").resolve()
        if path.parent != self.dir.resolve():  # belt and braces: the pattern already forbids it
            raise SnapshotNameError(f"{name!r} leaves the snapshot directory")
        return path

    def save(self, name: str, token_ids: list[int], payloads: list[bytes]) -> SnapshotInfo:
        """payloads: the first len(payloads) full blocks of token_ids, in order."""
        path = self.path(name)
        n = len(payloads) * self.fmt.block_size
        tokens = array("i", token_ids[:n]).tobytes()
        body = [COUNTS.pack(n, len(payloads)), tokens]
        for p in payloads:
            body += [LENGTH.pack(len(p)), p]
        size = sum(len(b) for b in body)
        total = write_atomic(path, [header(MAGIC, self.fmt, self.root, size), *body])
        return SnapshotInfo(name, path, n, total)

    def restore(self, name: str) -> SnapshotInfo:
        path = self.path(name)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise SnapshotNotFoundError(f"no saved KV state named {name!r}") from None
        try:
            _, _, body = verify(data, MAGIC, self.fmt, None)
        except CorruptFileError as e:
            raise SnapshotError(f"saved KV state {name!r} is unusable: {e}") from None
        if header_key(data) != self.root:
            raise SnapshotError(f"saved KV state {name!r} was saved for another model file or KV format")
        tokens, payloads = self._parse(name, body)
        if len(payloads) * self.fmt.block_bytes > self.disk.space:
            raise SnapshotError(f"saved KV state {name!r} needs {len(data) >> 20} MiB of disk tier; "
                                f"raise --kv-disk-space-mb (now {self.disk.space >> 20})")
        for block_hash, payload in zip(chain_hashes(self.root, tokens, self.fmt.block_size), payloads):
            self.disk.put_now(block_hash, payload)
        return SnapshotInfo(name, path, len(tokens), len(data))

    def _parse(self, name: str, body: memoryview) -> tuple[list[int], list[memoryview]]:
        """(token ids, block payloads); the checksum passed, so a bad count is a writer's bug."""
        n, blocks = COUNTS.unpack_from(body)
        off = COUNTS.size + 4 * n
        tokens = array("i")
        tokens.frombytes(body[COUNTS.size:off])
        payloads = []
        for _ in range(blocks):
            (length,) = LENGTH.unpack_from(body, off)
            payloads.append(body[off + LENGTH.size:off + LENGTH.size + length])
            off += LENGTH.size + length
            if length not in self.fmt.payload_sizes:
                raise SnapshotError(f"saved KV state {name!r} holds a block of {length} bytes; "
                                    f"this cache's blocks have {self.fmt.payload_sizes}")
        if n != blocks * self.fmt.block_size or off != len(body):
            raise SnapshotError(f"saved KV state {name!r} is inconsistent ({n} tokens, {blocks} blocks)")
        return tokens.tolist(), payloads
