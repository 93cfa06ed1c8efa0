"""Which blocks hold which request's K/V, and the prefix cache over full blocks.

A full block is keyed by a chained hash: blake2b(parent hash, its token ids), the first block's
parent being the cache key (model file + KV format). Equal keys mean equal K/V, in this process or,
later, on disk."""

from __future__ import annotations

import hashlib
from array import array
from dataclasses import dataclass

from hearth.engine.block_pool import BlockPool
from hearth.engine.request import Request


def hash_block(parent: bytes, token_ids: list[int]) -> bytes:
    h = hashlib.blake2b(parent, digest_size=16)
    h.update(array("i", token_ids).tobytes())
    return h.digest()


@dataclass(slots=True)
class PrefixCacheStats:
    queries: int = 0
    """Prompt tokens looked up in the prefix cache."""
    hits: int = 0
    """Of those, tokens found cached."""


class KVCacheManager:
    def __init__(self, num_blocks: int, block_size: int, cache_key: bytes = b"",
                 enable_prefix_caching: bool = True):
        self.block_size = block_size
        self.pool = BlockPool(num_blocks)
        self.cache_key = hashlib.blake2b(cache_key, digest_size=16).digest()
        self.enable_prefix_caching = enable_prefix_caching
        self.stats = PrefixCacheStats()

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def block_hashes(self, req: Request, num_blocks: int) -> list[bytes]:
        """The chained hashes of req's first num_blocks full blocks, computed once per request."""
        hashes, bs = req.block_hashes, self.block_size
        while len(hashes) < num_blocks:
            parent = hashes[-1] if hashes else self.cache_key
            hashes.append(hash_block(parent, req.token_slice(len(hashes) * bs, bs)))
        return hashes[:num_blocks]

    def find_cached_prefix(self, req: Request) -> list[int]:
        """Blocks holding the longest cached prefix of a request that has none computed yet.
        At least one token is always left to compute: its logits give the next token."""
        if not self.enable_prefix_caching:
            return []
        found = []
        for h in self.block_hashes(req, (req.num_tokens - 1) // self.block_size):
            block = self.pool.lookup(h)
            if block is None:
                break
            found.append(block)
        return found

    def allocate_slots(self, req: Request, num_new_tokens: int, cached: list[int] = ()) -> bool:
        """Grow req's block table to hold num_computed + num_new tokens after taking the `cached`
        prefix blocks (a request that starts from a cache hit); False, nothing taken, if short."""
        reused_free = sum(1 for b in cached if self.pool.ref_cnt[b] == 0)
        total = req.num_computed_tokens + len(cached) * self.block_size + num_new_tokens
        need = self.blocks_needed(total) - len(req.block_ids) - len(cached)
        if need > self.pool.num_free - reused_free:
            return False
        if req.num_computed_tokens == 0:  # an admission: count it for the hit rate
            self.stats.queries += req.num_tokens
            self.stats.hits += len(cached) * self.block_size
        if cached:
            self.pool.touch(cached)
            req.block_ids.extend(cached)
            req.num_computed_tokens += len(cached) * self.block_size
            req.num_registered_blocks = len(cached)
        if need > 0:
            req.block_ids.extend(self.pool.allocate(need))
        return True

    def cache_full_blocks(self, req: Request) -> None:
        """Register the blocks filled since the last call (their K/V is now written)."""
        if not self.enable_prefix_caching:
            return
        full = req.num_computed_tokens // self.block_size
        if full <= req.num_registered_blocks:
            return
        hashes = self.block_hashes(req, full)
        for i in range(req.num_registered_blocks, full):
            self.pool.cache(req.block_ids[i], hashes[i])
        req.num_registered_blocks = full

    def free(self, req: Request) -> None:
        self.pool.free(req.block_ids[::-1])
        req.block_ids = []
        req.num_registered_blocks = 0

    @property
    def num_used_blocks(self) -> int:
        return self.pool.num_blocks - self.pool.num_free
