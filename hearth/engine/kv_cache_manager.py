"""Which blocks hold which request's K/V, and the prefix cache over full blocks.

A full block is keyed by a chained hash: blake2b(parent hash, its token ids), the first block's
parent being the cache key (model file + KV format). Equal keys mean equal K/V, in this process or
in the disk tier (hearth.kvstore.disk), which continues a prefix where memory ends: blocks found on
disk get fresh block ids and travel to the runner as `kv_loads` (verified bytes, written into the
cache before the step reads them; findable by their hash once that step has run, like computed
blocks); full blocks newly computed go out as `kv_saves` (the runner returns their bytes, which are
queued for writing).

A model with recurrent layers (qwen35) also needs a state slot per running request: a pool of `state_slots`
(max_num_seqs) handed out with a request's first blocks and taken back with them (finish, abort, preemption).
Its prefix-cache hits end at a block whose hash has a state snapshot (hearth.engine.state_snapshots): one is
taken at the last block boundary before a prompt's last token (its chunk is cut to end there) and at each full
block a decode completes (the request's previous one dropped: the next turn of a conversation resends prompt +
answer); a hit's first step restores the snapshot into the request's slot."""

from __future__ import annotations

from dataclasses import dataclass

from hearth.engine.block_pool import BlockPool
from hearth.engine.lora_adapters import LoraAdapters
from hearth.engine.media_spans import block_salt, chunk_tokens
from hearth.engine.request import Request
from hearth.engine.state_snapshots import SnapshotIndex
from hearth.kvstore.block_hash import chain_hashes, hash_block, root_hash
from hearth.kvstore.disk import DiskKVStore

__all__ = ["KVCacheManager", "PrefixCacheStats", "hash_block"]


GENERATION_TAIL = 16
"""Tokens a chat template's generation prompt may add after the history (Qwen3.5's `<|im_start|>assistant\n<think>
\n\n</think>\n\n`: ~9): a snapshot this far before a prompt's end survives the next turn's re-render."""


@dataclass(slots=True)
class PrefixCacheStats:
    queries: int = 0
    """Prompt tokens looked up in the prefix cache."""
    hits: int = 0
    """Of those, tokens found cached."""
    disk_hits: int = 0
    """Of the hits, tokens loaded from the disk tier."""


class KVCacheManager:
    def __init__(self, num_blocks: int, block_size: int, cache_key: bytes = b"",
                 enable_prefix_caching: bool = True, disk: DiskKVStore | None = None, seals_full_blocks: bool = False,
                 lora: LoraAdapters | None = None, state_slots: int = 0, state_snapshots: int = 0):
        """lora: the model's adapters; a request's nonzero ones key its blocks (its root), so K/V computed
        with one adapter or scale is never reused for another. state_slots: the recurrent state pool's size
        (0: the model has no recurrent layers); state_snapshots: how many snapshots of a state the runner
        holds for prefix-cache hits (with prefix caching on; 0: no hit for such a model)."""
        self.snapshots = SnapshotIndex(state_snapshots if state_slots and enable_prefix_caching else 0)
        self.free_states = list(range(state_slots))[::-1]
        """Free recurrent state slots (popped from the end: slot 0 first)."""
        self.needs_state = state_slots > 0
        self.lora = lora
        self.block_size = block_size
        self.seals_full_blocks = seals_full_blocks
        """A quantized format encodes a block when its last slot is written (hearth.kvstore.paged):
        drafts must never reach a last slot, so every seal happens on a committed token."""
        self.pool = BlockPool(num_blocks)
        self.cache_key = root_hash(cache_key)
        self.enable_prefix_caching = enable_prefix_caching
        self.disk = disk if enable_prefix_caching else None
        self.stats = PrefixCacheStats()
        self.pending_loads: list[tuple[int, bytes]] = []
        """(block id, verified payload) for the runner to write before the next step reads them."""
        self.pending_saves: dict[bytes, int] = {}
        """hash -> block id of newly full blocks the disk tier lacks (the runner reads them out)."""
        self._given_back: set[bytes] = set()
        """Hashes whose save a failed step gave back: one more failure drops them (unsaved)."""

    def _root(self, req: Request) -> bytes:
        salt = b"" if self.lora is None else self.lora.cache_salt(req.params.lora)
        return root_hash(self.cache_key + b"|lora:" + salt) if salt else self.cache_key

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def block_hashes(self, req: Request, num_blocks: int) -> list[bytes]:
        """The chained hashes of req's first num_blocks full blocks, computed once per request."""
        hashes, bs = req.block_hashes, self.block_size
        while len(hashes) < num_blocks:
            parent, start = hashes[-1] if hashes else self._root(req), len(hashes) * bs
            salt = block_salt(req.media, start, bs) if req.media else b""  # image rows: their digests
            hashes.append(hash_block(parent, req.token_slice(start, bs), salt))
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
        return found[:self.restorable(req, len(found))]

    def restorable(self, req: Request, num_blocks: int) -> int:
        """How many of req's first num_blocks cached blocks a hit may take: all of them, or for a model with
        recurrent layers up to the last one whose state is held (the blocks past it are computed again)."""
        if not self.needs_state:
            return num_blocks
        hashes = self.block_hashes(req, num_blocks)
        while num_blocks and not self.snapshots.has(hashes[num_blocks - 1]):
            num_blocks -= 1
        return num_blocks

    def snapshot_boundary(self, req: Request) -> int:
        """The last block boundary before the prompt's last token: as far as a hit on this prompt can reach (its
        last token is always computed, for its logits), so its snapshot is taken there."""
        return (len(req.prompt_token_ids) - 1) // self.block_size * self.block_size

    def snapshot_boundaries(self, req: Request) -> tuple[int, ...]:
        """Where a prompt's state is saved: its snapshot boundary (an exact resend hits there), and the last block
        boundary GENERATION_TAIL tokens before its end, where the chat so far ends: a conversation's next turn
        re-renders the last turn without the generation prompt's tail (Qwen3.5's `<think>\n\n</think>\n\n`), so it
        leaves this prompt within its last few tokens (llama.cpp's server checkpoints before a prompt's end too)."""
        last = self.snapshot_boundary(req)
        chat = (len(req.prompt_token_ids) - 1 - GENERATION_TAIL) // self.block_size * self.block_size
        return (chat, last) if 0 < chat < last else (last,)

    def snapshot_chunk(self, req: Request, start: int, n: int) -> int:
        """n, or fewer so that a chunk crossing one of the prompt's snapshot boundaries ends on it (its state is
        saved); never inside a bidirectional image span (it comes whole: no snapshot there)."""
        if not self.snapshots.capacity:
            return n
        cut = next((b - start for b in self.snapshot_boundaries(req) if start < b < start + n), n)
        return cut if not req.media or chunk_tokens(req.media, start, cut) == cut else n

    def snapshot_after(self, req: Request, start: int, n: int) -> int:
        """The snapshot slot the runner saves req's state into after computing n tokens from start (-1: none):
        where they end on the prompt's snapshot boundary, or on a full block of its answer (which replaces the
        request's previous answer snapshot: one per conversation is what the next turn can use)."""
        end, bs, prompt = start + n, self.block_size, len(req.prompt_token_ids)
        at = self.snapshot_boundaries(req)
        if not self.snapshots.capacity or not end or end % bs or end < at[-1] and end not in at:
            return -1
        h = self.block_hashes(req, end // bs)[-1]
        if end > prompt and req.decode_snapshot is not None:  # dropped first: its slot takes the new one, which
            self.snapshots.drop(req.decode_snapshot)  # else evicted another conversation's at every block
            req.decode_snapshot = None
        slot = self.snapshots.reserve(h)
        if slot >= 0 and end > prompt:
            req.decode_snapshot = h
        return slot

    def pending_hashes(self, req: Request) -> list[bytes]:
        """Hashes of req's full blocks of known tokens (prompt, and output so far) not registered
        yet: K/V that this request is about to compute or load, so nobody else should compute it too."""
        if not self.enable_prefix_caching:
            return []
        n = req.num_tokens // self.block_size
        if self.needs_state:  # only a snapshot makes a hit: the one at its prompt's snapshot boundary, if ahead
            n = self.snapshot_boundary(req) // self.block_size
            behind = n and self.snapshots.capacity and req.num_computed_tokens < n * self.block_size
            return self.block_hashes(req, n)[-1:] if behind else []
        self.block_hashes(req, n)  # computes what is missing, once per request
        return req.block_hashes[req.num_registered_blocks:n]

    def find_disk_prefix(self, req: Request, start: int) -> list[tuple[bytes, bytes]]:
        """(hash, verified payload) of the blocks after the first `start` that continue the prefix
        from the disk tier. A request that has to wait for free blocks keeps what was read, so the
        files are read once; a file that fails its check ends the prefix there (recomputed)."""
        if self.disk is None:
            return []
        hashes = self.block_hashes(req, (req.num_tokens - 1) // self.block_size)[start:]
        kept = dict(req.disk_payloads)
        found = []
        for h in hashes:
            if h not in kept:
                break
            found.append((h, kept[h]))
        rest = hashes[len(found):]
        if rest:  # a file that failed before is gone from the index: no retry
            found += zip(rest, self.disk.get_many(rest))
        req.disk_payloads = found
        return found

    def allocate_slots(self, req: Request, num_new_tokens: int, cached: list[int] = (),
                       loads: list[tuple[bytes, bytes]] = ()) -> bool:
        """Grow req's block table to hold num_computed + num_new tokens after taking the `cached`
        prefix blocks and then fresh blocks for the `loads` found on disk (a request that starts
        from a cache hit); False, nothing taken, if short."""
        reused_free = sum(1 for b in cached if self.pool.ref_cnt[b] == 0)
        hit = len(cached) + len(loads)
        total = req.num_computed_tokens + hit * self.block_size + num_new_tokens
        need = self.blocks_needed(total) - len(req.block_ids) - len(cached)
        if need > self.pool.num_free - reused_free:
            return False
        if self.needs_state and req.state_slot < 0:
            if not self.free_states:  # never while running requests <= max_num_seqs, the pool's size
                return False
            req.state_slot = self.free_states.pop()
        if req.num_computed_tokens == 0:  # an admission: count it for the hit rate
            self.stats.queries += req.num_tokens
            self.stats.hits += hit * self.block_size
            self.stats.disk_hits += len(loads) * self.block_size
        if cached:  # before anything is allocated: allocation evicts free cached blocks
            self.pool.touch(cached)
            req.block_ids.extend(cached)
        if need > 0:
            fresh = self.pool.allocate(need)
            # findable only once the step that loads them has run (cache_full_blocks, from update):
            # a step that fails, or an abort before it, must leave no hash on unwritten K/V
            self.pending_loads += zip(fresh, (payload for _, payload in loads))
            req.block_ids.extend(fresh)
        if hit:
            req.num_computed_tokens += hit * self.block_size
            req.num_registered_blocks = len(cached)
            if self.needs_state:  # its first step starts from the state after its last hit block
                req.state_restore = self.snapshots.take(self.block_hashes(req, hit)[-1])
        req.disk_payloads = []
        return True

    def cache_full_blocks(self, req: Request) -> None:
        """Register the blocks filled since the last call (their K/V is now written: computed, or
        loaded from the disk tier by the step that just ran; those the disk has already are not saved)."""
        if not self.enable_prefix_caching:
            return
        full = req.num_computed_tokens // self.block_size
        if full <= req.num_registered_blocks:
            return
        hashes = self.block_hashes(req, full)
        for i in range(req.num_registered_blocks, full):
            self.pool.cache(req.block_ids[i], hashes[i])
            if self.disk is not None and hashes[i] not in self.pending_saves and not self.disk.contains(hashes[i]):
                self.pending_saves[hashes[i]] = req.block_ids[i]
        req.num_registered_blocks = full

    def free_slots(self, req: Request, num_new_tokens: int) -> int:
        """Slots past req's num_computed + num_new tokens that allocate_slots can give it now
        without anyone losing a block: the rest of its table's last block and every free block
        (cached free blocks included: they are evicted in LRU order, as for any allocation)."""
        used = req.num_computed_tokens + num_new_tokens
        return (len(req.block_ids) + self.pool.num_free) * self.block_size - used

    def max_drafts(self, req: Request, k: int) -> int:
        """How many of k drafts after req's next token may be written: all of them, or with sealing
        blocks only those before the next block's last slot (draft i sits at num_computed + 1 + i)."""
        if not self.seals_full_blocks:
            return k
        first = req.num_computed_tokens + 1
        return min(k, self.block_size - 1 - first % self.block_size)

    def trim(self, req: Request) -> None:
        """Free the blocks past the ones holding req's valid K/V (those only rejected drafts filled).
        They were allocated fresh this step and never registered, so no prefix-cache entry moves."""
        keep = self.blocks_needed(req.num_computed_tokens)
        if len(req.block_ids) > keep:
            self.pool.free(req.block_ids[keep:][::-1])
            del req.block_ids[keep:]

    def take_transfers(self) -> tuple[list[tuple[int, bytes]], list[tuple[int, bytes]]]:
        """(kv_loads, kv_saves) for the next SchedulerOutput. Saves read blocks as the last step
        left them: the runner reads them out before it loads or computes anything."""
        loads, self.pending_loads = self.pending_loads, []
        saves = [(block, h) for h, block in self.pending_saves.items()]
        self.pending_saves = {}
        return loads, saves

    def unsaved(self, saves: list[tuple[int, bytes]]) -> None:
        """Saves a failed step took and never handed over go back to the queue once, each under the
        block holding its hash now (a second failure drops them: reading them may be what fails). A
        failed step writes only blocks that hold no hash (fresh ones, the unregistered tail): one it
        took from the cache lost its hash then, so its save is dropped."""
        for _, h in saves:
            block = self.pool.lookup(h)
            if h in self._given_back or block is None:
                self._given_back.discard(h)
            else:
                self._given_back.add(h)
                self.pending_saves.setdefault(h, block)

    def saved(self, saves: list[tuple[int, bytes]], payloads: list[bytes]) -> None:
        """Hand the bytes the runner read out of `saves` to the disk tier's writer."""
        for (_, h), payload in zip(saves, payloads):
            self.disk.put(h, payload)
            self._given_back.discard(h)

    def locate_prefix(self, token_ids: list[int]) -> list[int | bytes]:
        """For each full block of token_ids, in order: its block id when in memory, else its payload
        from the disk tier; stops at the first block found in neither."""
        found: list[int | bytes] = []
        for h in chain_hashes(self.cache_key, token_ids, self.block_size):
            block = self.pool.lookup(h)
            payload = self.disk.get(h) if block is None and self.disk is not None else None
            if block is None and payload is None:
                break
            found.append(block if block is not None else payload)
        return found

    def close(self) -> None:
        """Finish queued disk writes."""
        if self.disk is not None:
            self.disk.close()

    def free(self, req: Request) -> None:
        if self.pending_loads:  # loads not sent yet (a failed schedule): their blocks go back unwritten
            mine = set(req.block_ids)
            self.pending_loads = [(b, p) for b, p in self.pending_loads if b not in mine]
        self.pool.free(req.block_ids[::-1])
        req.block_ids = []
        req.num_registered_blocks = 0
        req.state_restore = -1
        if req.state_slot >= 0:
            self.free_states.append(req.state_slot)
            req.state_slot = -1

    @property
    def num_used_blocks(self) -> int:
        return self.pool.num_blocks - self.pool.num_free
