"""KV-cache block ids with reference counts and a prefix cache. Plain Python so tests check exact ids.

A block is free when no request holds it (ref_cnt 0). A free block that is full and hashed keeps its
K/V and stays findable by its hash until it is handed out again. Allocation first takes free blocks
that hold nothing findable, most recently freed first (no cached prefix is lost, and their pages are
already resident: an untouched block costs page faults on its first write), then evicts cached
blocks in LRU order, so the least recently released one goes first (vLLM's free-block queue)."""

from __future__ import annotations

from collections import OrderedDict


class BlockPool:
    def __init__(self, num_blocks: int):
        self.num_blocks = num_blocks
        self.ref_cnt = [0] * num_blocks
        self.block_hash: list[bytes | None] = [None] * num_blocks
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        """Blocks with ref_cnt 0, least recently freed first (the eviction order)."""
        self._cached: dict[bytes, int] = {}
        """hash -> block id holding that full block's K/V (held or free)."""
        self._empty: list[int] = list(range(num_blocks))[::-1]
        """Free blocks without a hash, most recently freed last (may hold stale entries: checked on use)."""
        self.untouched_from = 0
        """Blocks from this id on were never handed out (their pages may not be resident yet): the
        initial empty list hands them out in id order, after every block freed since."""

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_cached(self) -> int:
        return len(self._cached)

    def allocate(self, n: int) -> list[int] | None:
        """n fresh blocks (ref_cnt 1) in eviction order, or None (nothing taken) when fewer are free."""
        if n > len(self._free):
            return None
        blocks = []
        for _ in range(n):
            block = self._take()
            self.ref_cnt[block] = 1
            blocks.append(block)
        return blocks

    def _take(self) -> int:
        while self._empty:
            block = self._empty.pop()
            if block in self._free and self.block_hash[block] is None:
                del self._free[block]
                self.untouched_from = max(self.untouched_from, block + 1)
                return block
        block, _ = self._free.popitem(last=False)
        self._evict(block)
        return block

    def untouched(self, n: int) -> range:
        """The next n (or fewer) never-used blocks, in the order they will be handed out."""
        return range(self.untouched_from, min(self.untouched_from + n, self.num_blocks))

    def lookup(self, block_hash: bytes) -> int | None:
        return self._cached.get(block_hash)

    def touch(self, block_ids: list[int]) -> None:
        """Take one more reference on cached blocks a new request reuses."""
        for block in block_ids:
            if self.ref_cnt[block] == 0:
                del self._free[block]
            self.ref_cnt[block] += 1

    def free(self, block_ids: list[int]) -> None:
        """Drop one reference each. Callers pass a request's table tail first, so its last blocks,
        the least likely to be shared, are evicted before its first ones."""
        for block in block_ids:
            if self.ref_cnt[block] <= 0:
                raise RuntimeError(f"block {block} freed twice")
            self.ref_cnt[block] -= 1
            if self.ref_cnt[block] == 0:
                self._free[block] = None
                if self.block_hash[block] is None:
                    self._empty.append(block)
        if len(self._empty) > 2 * self.num_blocks:  # drop stale entries
            self._empty = [b for b in self._empty if b in self._free and self.block_hash[b] is None]

    def cache(self, block: int, block_hash: bytes) -> None:
        """Make a full block findable by its hash (the first block with a given hash wins)."""
        if self.block_hash[block] is None and block_hash not in self._cached:
            self.block_hash[block] = block_hash
            self._cached[block_hash] = block

    def _evict(self, block: int) -> None:
        h = self.block_hash[block]
        if h is not None:
            del self._cached[h]
            self.block_hash[block] = None

    def reset_prefix_cache(self) -> None:
        for block in list(self._free):
            if self.block_hash[block] is not None:
                self._evict(block)
                self._empty.append(block)
