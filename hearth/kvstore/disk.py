"""The disk tier of the prefix cache: one file per full KV block, named by its chained hash
(hearth.kvstore.block_hash), holding the block's bytes exactly as the cache stores them (every
layer's K and V: f16/bf16 pages, or the codec's encoded block) in the format of disk_format.py.

- Lookups are by hash in an in-memory index, rebuilt at start by listing the directory (stat only);
  a file's content is checked when it is read, and a file that fails the check is deleted, counted
  in `stats.corrupt` and never returned.
- Writes go through a background thread and a queue bounded in bytes, so decoding never waits on
  the disk; when the queue is full a write is dropped (the block is still cached in memory).
- The directory stays within `space_bytes` by evicting the file of lowest GreedyDual-Size-Frequency
  priority (Cherkasova 1998): priority = L + hits * COST / size, where L rises to each evicted
  file's priority, so recency (L at the last hit), hits and size all count. Hit counts are not kept
  across restarts: a rebuilt index ranks files by modification time (a hit touches the file).

- Shared by several engines (a cluster's replicas, on one machine or over a shared filesystem), each
  store has an `owner` name and writes, scans and evicts only its own `blocks/<owner>/` within its
  own `space_bytes`; a block it lacks is looked for by name in the other owners' folders and read
  from there, never deleted there. So one budget per owner, and no owner removes another's live file.

Torch-free: the engine's thread calls contains() and get(); the runner never sees this store."""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from hearth.kvstore.block_hash import DIGEST
from hearth.kvstore.disk_format import BlockFormat, CorruptFileError, header, verify, write_atomic

log = logging.getLogger("hearth.kvstore")

MAGIC = b"HKVB"
SUFFIX = ".kvb"
COST = float(1 << 20)
"""GDSF's cost of a miss: a hit on a 1 MiB file adds 1.0 to its priority."""
STALE_TMP_SECONDS = 600
READ_THREADS = 2
PEERS_RELIST_SECONDS = 2.0
"""A shared store lists the other owners' folders at most this often (new replicas appear rarely)."""


@dataclass(slots=True)
class DiskStats:
    hits: int = 0
    """Blocks read back and verified."""
    writes: int = 0
    """Blocks written."""
    dropped: int = 0
    """Writes dropped because the write queue was full."""
    corrupt: int = 0
    """Files rejected when read (bad header, length or checksum) and deleted."""
    evictions: int = 0
    write_errors: int = 0
    files: int = 0
    bytes: int = 0


@dataclass(slots=True)
class _Entry:
    size: int
    hits: int
    priority: float = 0.0
    seq: int = 0
    """Of the entry's live heap item (older heap items of the same hash are stale)."""


class DiskKVStore:
    def __init__(self, directory: str | os.PathLike, space_bytes: int, fmt: BlockFormat, *,
                 max_pending_bytes: int = 256 << 20, fsync: bool = True, owner: str = ""):
        """owner: this store's name in a directory shared with other stores ("" = not shared)."""
        base = Path(directory) / "blocks"
        self.dir = base / owner if owner else base
        self.dir.mkdir(parents=True, exist_ok=True)
        self._shared_root = base if owner else None
        self._peers: list[Path] = []
        self._peers_listed = float("-inf")
        self._foreign: dict[bytes, Path] = {}
        """Blocks found in another owner's folder: read from there, never evicted by this store."""
        self.space, self.fmt, self.fsync = space_bytes, fmt, fsync
        self.max_pending = max_pending_bytes
        self._stats = DiskStats()
        self._lock = threading.Condition()
        self._index: dict[bytes, _Entry] = {}
        self._heap: list[tuple[float, int, bytes]] = []
        self._seq = itertools.count()
        self._inflation = 0.0
        """GDSF's L: the priority of the last evicted file."""
        self._bytes = 0
        self._pending: dict[bytes, int] = {}
        """hash -> payload bytes queued for writing."""
        self._pending_bytes = 0
        self._closed = False
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        # reads and checksums release the GIL: a long prefix is verified on two cores at once
        self._readers = ThreadPoolExecutor(READ_THREADS, thread_name_prefix="hearth-kv-read")
        self._scan()
        self._thread = threading.Thread(target=self._write_loop, name="hearth-kv-disk", daemon=True)
        self._thread.start()

    # -- reads (the engine thread) ----------------------------------------------------------

    def path(self, block_hash: bytes) -> Path:
        return self.dir / f"{block_hash.hex()}{SUFFIX}"

    def contains(self, block_hash: bytes) -> bool:
        """On disk or queued for writing (no need to write it again)."""
        with self._lock:
            if block_hash in self._index or block_hash in self._pending:
                return True
        return self._find_foreign(block_hash) is not None

    def get(self, block_hash: bytes) -> memoryview | None:
        """The block's verified payload, or None (absent, or rejected and deleted)."""
        with self._lock:
            mine = block_hash in self._index
        path = self.path(block_hash) if mine else self._find_foreign(block_hash)
        if path is None:
            return None
        try:
            data = path.read_bytes()
        except OSError:  # evicted meanwhile, or removed by someone else
            if mine:
                self._drop(block_hash)
            else:
                self._foreign.pop(block_hash, None)
            return None
        try:
            _, n, payload = verify(data, MAGIC, self.fmt, block_hash)
            if n not in self.fmt.payload_sizes:
                raise CorruptFileError(f"payload of {n} bytes; this cache's blocks have {self.fmt.payload_sizes}")
        except CorruptFileError as e:
            log.warning("KV disk tier: ignoring %s: %s", path.name, e)
            with self._lock:
                self._stats.corrupt += 1
            if mine:
                self._drop(block_hash, unlink=True)
            else:  # another owner's file: its owner deletes it when it reads it
                self._foreign.pop(block_hash, None)
            return None
        with self._lock:
            entry = self._index.get(block_hash)
            if entry is not None:
                entry.hits += 1
                self._prioritize(block_hash, entry)
            self._stats.hits += 1
        try:
            os.utime(path)  # recency survives a restart: the rebuilt index ranks by mtime
        except OSError:
            pass
        return payload

    def get_many(self, hashes: list[bytes]) -> list[memoryview]:
        """The verified payloads of the longest run of `hashes`, from the first, found on disk."""
        n = next((i for i, h in enumerate(hashes) if not self._on_disk(h)), len(hashes))
        found = []
        for payload in self._readers.map(self.get, hashes[:n]) if n > 1 else map(self.get, hashes[:n]):
            if payload is None:
                break
            found.append(payload)
        return found

    def _on_disk(self, block_hash: bytes) -> bool:
        with self._lock:
            if block_hash in self._index:
                return True
        return self._find_foreign(block_hash) is not None

    def _find_foreign(self, block_hash: bytes) -> Path | None:
        """The block's file in another owner's folder, when this store is shared and one has it."""
        if self._shared_root is None:
            return None
        known = self._foreign.get(block_hash)
        if known is not None:
            return known
        name = f"{block_hash.hex()}{SUFFIX}"
        for peer in self._peer_dirs():
            path = peer / name
            if path.is_file():
                self._foreign[block_hash] = path
                if len(self._foreign) > 4 * len(self._index) + 4096:  # forget old finds now and then
                    self._foreign = {block_hash: path}
                return path
        return None

    def _peer_dirs(self) -> list[Path]:
        now = time.monotonic()
        if now - self._peers_listed > PEERS_RELIST_SECONDS:
            try:
                self._peers = [Path(e.path) for e in os.scandir(self._shared_root)
                               if e.is_dir() and Path(e.path) != self.dir]
            except OSError:
                self._peers = []
            self._peers_listed = now
        return self._peers

    # -- writes -----------------------------------------------------------------------------

    def put(self, block_hash: bytes, payload: bytes) -> bool:
        """Queue a write; False when the queue is full (the write is dropped, not waited for) or
        the store is closed."""
        self._check(payload)
        with self._lock:
            if block_hash in self._index or block_hash in self._pending:
                return True
            if self._closed or self._pending_bytes + len(payload) > self.max_pending:
                self._stats.dropped += 1
                return False
            self._pending[block_hash] = len(payload)
            self._pending_bytes += len(payload)
        self._queue.put((block_hash, payload))
        return True

    def put_now(self, block_hash: bytes, payload: bytes) -> None:
        """Write on the caller's thread (a restored snapshot), unless the block is already there."""
        self._check(payload)
        if not self.contains(block_hash):
            self._write(block_hash, payload)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until queued writes are on disk; False on timeout."""
        with self._lock:
            return self._lock.wait_for(lambda: not self._pending, timeout)

    def close(self, timeout: float | None = 30.0) -> None:
        """Finish queued writes and stop the writer; reads still work, later writes are dropped."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.flush(timeout)
        self._queue.put(None)
        self._thread.join(timeout)
        self._readers.shutdown(wait=False)

    @property
    def stats(self) -> DiskStats:
        with self._lock:
            s = self._stats
            return DiskStats(s.hits, s.writes, s.dropped, s.corrupt, s.evictions, s.write_errors,
                             len(self._index), self._bytes)

    def _check(self, payload: bytes) -> None:
        if len(payload) not in self.fmt.payload_sizes:
            raise ValueError(f"a KV block payload has {self.fmt.payload_sizes} bytes, not {len(payload)}")

    def _write_loop(self) -> None:
        while (item := self._queue.get()) is not None:
            block_hash, payload = item
            try:
                self._write(block_hash, payload)
            except OSError as e:
                log.warning("KV disk tier: could not write block %s: %s", block_hash.hex(), e)
                with self._lock:
                    self._stats.write_errors += 1
            finally:
                with self._lock:
                    self._pending_bytes -= self._pending.pop(block_hash, 0)
                    self._lock.notify_all()

    def _write(self, block_hash: bytes, payload: bytes) -> None:
        head = header(MAGIC, self.fmt, block_hash, len(payload))
        if len(head) + len(payload) > self.space:
            return
        size = write_atomic(self.path(block_hash), [head, payload], self.fsync)
        with self._lock:
            if block_hash not in self._index:
                self._add(block_hash, size)
                self._stats.writes += 1
            self._evict()

    # -- index and eviction (callers hold the lock) -------------------------------------------

    def _add(self, block_hash: bytes, size: int) -> None:
        entry = self._index[block_hash] = _Entry(size, hits=1)
        self._bytes += size
        self._prioritize(block_hash, entry)

    def _prioritize(self, block_hash: bytes, entry: _Entry) -> None:
        entry.priority = self._inflation + entry.hits * COST / entry.size
        entry.seq = next(self._seq)
        heapq.heappush(self._heap, (entry.priority, entry.seq, block_hash))
        if len(self._heap) > 2 * len(self._index) + 64:  # drop stale items now and then
            self._heap = [(e.priority, e.seq, h) for h, e in self._index.items()]
            heapq.heapify(self._heap)

    def _evict(self) -> None:
        while self._bytes > self.space and self._heap:
            priority, seq, block_hash = heapq.heappop(self._heap)
            entry = self._index.get(block_hash)
            if entry is None or entry.seq != seq:
                continue
            self._inflation = priority
            self._remove(block_hash, entry)
            self._stats.evictions += 1
            self.path(block_hash).unlink(missing_ok=True)

    def _remove(self, block_hash: bytes, entry: _Entry) -> None:
        del self._index[block_hash]
        self._bytes -= entry.size

    def _drop(self, block_hash: bytes, unlink: bool = False) -> None:
        with self._lock:
            entry = self._index.get(block_hash)
            if entry is not None:
                self._remove(block_hash, entry)
        if unlink:
            self.path(block_hash).unlink(missing_ok=True)

    def _scan(self) -> None:
        """Rebuild the index from the directory listing, oldest file first (evicted first on ties)."""
        found = []
        for item in os.scandir(self.dir):
            if item.name.endswith(".tmp"):
                if _stale_tmp(item):
                    Path(item.path).unlink(missing_ok=True)
                continue
            try:
                block_hash = bytes.fromhex(item.name.removesuffix(SUFFIX))
                st = item.stat()
            except (ValueError, OSError):
                continue
            if item.name.endswith(SUFFIX) and len(block_hash) == DIGEST:
                found.append((st.st_mtime_ns, block_hash, st.st_size))
        with self._lock:
            for _, block_hash, size in sorted(found):
                self._add(block_hash, size)
            self._evict()


def _stale_tmp(item: os.DirEntry) -> bool:
    """A temporary file whose writer died (a write cut short): remove it. Names end .PID.ID.tmp."""
    try:
        pid = int(item.name.split(".")[-3])
        age = time.time() - item.stat().st_mtime
    except (ValueError, IndexError, OSError):
        return True
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    return age > STALE_TMP_SECONDS
