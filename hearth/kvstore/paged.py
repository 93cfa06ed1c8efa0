"""A layer's quantized paged KV cache and the per-step plan of where each new token's K/V go.

Blocks are encoded once, when they become full, and never change after (the prefix cache may share
them). Until then a block lives in an f16 staging slot of the request filling it: one slot per
request, reused block after block since a request fills its blocks in order. With a sink (KVarN),
a sequence's first block also keeps an f16 copy in a slot keyed by its block id, so requests that
share that block through the prefix cache share the copy; an unowned copy is evicted (least
recently used first) when slots run out, and readers then fall back to its encoded form.

The runner builds one StepPlan per step (plain Python + index tensors, shared by every layer);
each layer's QuantizedKVCache applies it: write() seals full blocks and stages the rest; read()
returns one sequence's K/V, decoding only the blocks it reads."""

from __future__ import annotations

import math
import mmap
from collections import OrderedDict
from dataclasses import dataclass, field

import torch

from hearth.kvstore.codecs import STAGING_DTYPE, QuantCodec
from hearth.openmp import one_thread


def lazy_zeros(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Zeros whose pages become resident only when written: an anonymous mapping is zero pages
    until touched, where torch.zeros would touch all of them (a 2 GB KV pool would cost 2 GB RSS and
    a second of load time before the first token). Huge pages are refused: each layer writes a few
    KB per block, which must not pin 2 MB pages (measured: SmolLM2's KV cost ~80 MB RSS with them;
    and 2 MB pages made batched decode no faster)."""
    nbytes = math.prod(shape) * dtype.itemsize
    private = {"flags": mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS} if hasattr(mmap, "MAP_PRIVATE") else {}
    buf = mmap.mmap(-1, max(1, nbytes), **private)
    if hasattr(mmap, "MADV_NOHUGEPAGE"):
        buf.madvise(mmap.MADV_NOHUGEPAGE)
    return torch.frombuffer(buf, dtype=torch.uint8)[:nbytes].view(dtype).view(shape)


@dataclass(slots=True)
class SeqRead:
    """How to read one sequence's context: blocks in order; the first may come from a sink slot and
    the last (when partial) from the request's fill slot; the rest are sealed (encoded) blocks."""

    ctx: int
    block_ids: torch.Tensor  # [ceil(ctx / bs)] int64
    sink_slot: int = -1
    tail_slot: int = -1
    start: int = 0
    """Position of the sequence's first new token this step."""


@dataclass(slots=True)
class StepPlan:
    seqs: list[SeqRead]
    num_slots: int
    """Staging slots the layers must hold (grows when more requests run than planned for)."""
    stage_rows: torch.Tensor  # [n] batch rows that go to staging ...
    stage_dst: torch.Tensor  # [n] ... at flat staging positions slot * bs + offset
    seal_blocks: torch.Tensor  # [m] block ids that become full this step
    new_rows: torch.Tensor  # [r] batch rows of those blocks ...
    new_dst: torch.Tensor  # [r] ... at rows of the [m * bs] block buffer
    prefix_src: torch.Tensor  # flat staging positions of what a request staged earlier in those blocks
    prefix_dst: torch.Tensor
    sink_copies: list[tuple[int, int]] = field(default_factory=list)
    """(index into seal_blocks, sink slot): first blocks whose f16 copy is kept."""
    sealed: dict[int, int] = field(default_factory=dict)
    """block id -> index into seal_blocks, for the blocks sealed this step."""

    def fresh_refs(self, i: int, bs: int) -> list[int]:
        """For each block of sequence i from its first new token's to its last: where the f16 values its
        queries in that block see of it are: a staging slot >= 0 (the block being filled), or -1 - k
        for the k-th block sealed this step (QuantizedKVCache.fresh, its values before encoding)."""
        s = self.seqs[i]
        nb = s.block_ids.numel()
        return [s.tail_slot if j == nb - 1 and s.tail_slot >= 0 else -1 - self.sealed[int(s.block_ids[j])]
                for j in range(s.start // bs, nb)]


def _long(x) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.long) if not isinstance(x, torch.Tensor) else x


class StagingTable:
    """Which staging slot holds what, shared by every layer of one runner."""

    def __init__(self, block_size: int, slots: int, sink: bool):
        self.bs, self.sink = block_size, sink
        self.capacity = slots
        self.free = list(range(slots))[::-1]
        self.fill: dict[str, int] = {}
        self.sinks: OrderedDict[int, int] = OrderedDict()  # block id -> slot, least recently used first
        self.owners: dict[int, set[str]] = {}

    def release(self, request_id: str) -> None:
        slot = self.fill.pop(request_id, None)
        if slot is not None:
            self.free.append(slot)
        for owners in self.owners.values():
            owners.discard(request_id)

    def _take(self) -> int:
        if not self.free:
            victim = next((b for b in self.sinks if not self.owners.get(b)), None)
            if victim is not None:
                self.forget_sink(victim)
            else:
                self.free.append(self.capacity)
                self.capacity += 1
        return self.free.pop()

    def _fill_slot(self, rid: str) -> int:
        if rid not in self.fill:
            self.fill[rid] = self._take()
        return self.fill[rid]

    def forget_sink(self, block: int) -> None:
        slot = self.sinks.pop(block, None)
        if slot is not None:
            self.free.append(slot)
            self.owners.pop(block, None)

    def adopt_sink(self, block: int) -> int:
        """A slot for the f16 copy of a first block loaded from disk; unowned (evictable) until a
        request reads it. The layers must hold `capacity` slots after this (it may grow)."""
        self.forget_sink(block)
        self.sinks[block] = self._take()
        return self.sinks[block]

    def _sink_slot(self, block: int, rid: str) -> int:
        if block not in self.sinks:
            self.sinks[block] = self._take()
        self.owners.setdefault(block, set()).add(rid)
        return self.sinks[block]

    def plan(self, seqs: list[tuple[str, int, int, list[int]]], row_starts: list[int]) -> StepPlan:
        """seqs: (request id, start position, new tokens, block table) in batch order."""
        bs = self.bs
        stage_rows, stage_dst, seal, new_rows, new_dst, pre_src, pre_dst, sinks = [], [], [], [], [], [], [], []
        for (rid, p0, n, table), r0 in zip(seqs, row_starts):
            p1 = p0 + n
            for j in range(p0 // bs, (p1 - 1) // bs + 1):
                lo, hi, base = max(p0, j * bs), min(p1, (j + 1) * bs), j * bs
                rows = range(r0 + lo - p0, r0 + hi - p0)
                if lo == base:  # fresh content in this block id: an old sink copy of it is stale
                    self.forget_sink(table[j])
                if hi == base + bs:  # full after this step: encode it
                    k = len(seal)
                    seal.append(table[j])
                    if lo > base:
                        slot = self._fill_slot(rid)
                        pre_src.extend(range(slot * bs, slot * bs + lo - base))
                        pre_dst.extend(range(k * bs, k * bs + lo - base))
                    new_rows.extend(rows)
                    new_dst.extend(range(k * bs + lo - base, k * bs + bs))
                    if self.sink and j == 0:
                        sinks.append((k, self._sink_slot(table[0], rid)))
                else:
                    slot = self._fill_slot(rid)
                    stage_rows.extend(rows)
                    stage_dst.extend(range(slot * bs + lo - base, slot * bs + hi - base))
        reads = [self._read(rid, p0, p0 + n, table) for rid, p0, n, table in seqs]
        return StepPlan(reads, self.capacity, _long(stage_rows), _long(stage_dst), _long(seal), _long(new_rows),
                        _long(new_dst), _long(pre_src), _long(pre_dst), sinks, {b: k for k, b in enumerate(seal)})

    def _read(self, rid: str, start: int, ctx: int, table: list[int]) -> SeqRead:
        nb = -(-ctx // self.bs)
        tail = self.fill[rid] if ctx % self.bs else -1
        sink = -1
        if self.sink and not (tail >= 0 and nb == 1) and table[0] in self.sinks:
            sink = self._sink_slot(table[0], rid)
            self.sinks.move_to_end(table[0])
        return SeqRead(ctx, _long(table[:nb]), sink, tail, start)


def _bytes(t: torch.Tensor) -> torch.Tensor:
    """A raw-byte view (index_copy/index_select have no float8 kernels on CPU)."""
    return t.view(torch.uint8) if t.dtype.itemsize == 1 else t


class QuantizedKVCache:
    """One layer: encoded blocks (codec fields, each [num_blocks, ...]) + f16 staging slots."""

    def __init__(self, codec: QuantCodec, num_blocks: int, block_size: int, kv_heads: int, head_dim: int,
                 slots: int, zeros=lazy_zeros):
        """zeros(shape, dtype): where the tensors live (a backend's kv_zeros: host pages, or a device's)."""
        codec.check(block_size, head_dim)
        self.codec, self.bs, self.kv_heads, self.head_dim = codec, block_size, kv_heads, head_dim
        self.store = {part: {name: zeros((num_blocks, *shape), dtype) for name, (shape, dtype) in f.items()}
                      for part, f in codec.fields(block_size, kv_heads, head_dim).items()}
        # int64 [8]: addresses of K's fields then V's (codec order, 0-padded to 4 each), for native readers
        self.field_ptrs = torch.tensor([p for part in self.store.values()
                                        for p in ([t.data_ptr() for t in part.values()] + [0] * 4)[:4]])
        # staging: [2 (k, v), slots, block_size, kv_heads, head_dim] f16
        self.staging = zeros((2, slots, block_size, kv_heads, head_dim), STAGING_DTYPE)
        self.rotation = codec.rotation(head_dim)
        self.fresh = None  # this step's sealed blocks before encoding: [2, m, bs, kv_heads, head_dim] f16

    @property
    def device(self) -> torch.device:
        return self.staging.device

    @property
    def nbytes(self) -> int:
        tensors = [t for part in self.store.values() for t in part.values()] + [self.staging]
        return sum(t.numel() * t.element_size() for t in tensors)

    def _flat_staging(self) -> torch.Tensor:
        return self.staging.view(2, -1, self.kv_heads, self.head_dim)

    def ensure_slots(self, slots: int) -> None:
        if slots > self.staging.shape[1]:
            self._grow(slots)

    def _grow(self, slots: int) -> None:
        extra = torch.zeros(2, slots - self.staging.shape[1], *self.staging.shape[2:], dtype=STAGING_DTYPE,
                            device=self.device)
        self.staging = torch.cat([self.staging, extra], 1)

    def write(self, kv: torch.Tensor, plan: StepPlan, fast=None) -> None:
        """kv: [T, 2, kv_heads, head_dim] (the batch's new K and V, unrotated). fast: the native kernels
        (hearth.kernels.native) or None: their hadamard() rotates f32 K/V in place of the matmul (the
        [d, d] matrix streamed per layer cost a decode step ~50 us a layer), their kv_encode() encodes
        KVarN blocks (the same fields, ~10x faster) and their kv_write stages the rows of steps that
        seal no block (decodes) with torch's f16 rounding."""
        self.ensure_slots(plan.num_slots)
        native = fast is not None and kv.dtype == torch.float32
        if self.rotation is not None:
            rotated = fast.hadamard(kv) if native else None
            kv = rotated if rotated is not None else kv.float() @ self.rotation
        if native and not plan.seal_blocks.numel():
            fast.kv_write(kv.reshape(kv.shape[0], -1), plan.stage_dst, self.staging)  # every row is staged, in order
            return
        kv = kv.to(STAGING_DTYPE)  # what staging holds; sealed blocks encode the same values
        flat = self._flat_staging()
        m = plan.seal_blocks.numel()
        if m:  # assemble the full blocks before staging writes reuse their slots
            comp = torch.empty(2, m * self.bs, self.kv_heads, self.head_dim, dtype=STAGING_DTYPE)
            if plan.prefix_src.numel():
                comp[:, plan.prefix_dst] = flat[:, plan.prefix_src]
            comp[:, plan.new_dst] = kv[plan.new_rows].transpose(0, 1)
            comp = comp.view(2, m, self.bs, self.kv_heads, self.head_dim)
            self.fresh = comp
            for i, part in enumerate(("k", "v")):
                quantizer = getattr(self.codec, part)
                enc = fast.kv_encode(quantizer, comp[i]) if native else None
                if enc is None:
                    with one_thread():  # hundreds of small ops: a second thread only adds sync stalls
                        enc = quantizer.encode(comp[i].float())
                for name, t in self.store[part].items():
                    _bytes(t).index_copy_(0, plan.seal_blocks, _bytes(enc[name]))
            for k, slot in plan.sink_copies:
                self.staging[:, slot] = comp[:, k]
        if plan.stage_rows.numel():
            flat[:, plan.stage_dst] = kv[plan.stage_rows].transpose(0, 1)

    def read_fresh(self, plan: StepPlan, i: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """[2, ctx - b0, kv_heads, head_dim], b0 = the start of the block holding sequence i's first new
        token: the f16 values of the blocks this step wrote into, as they were before sealing (what
        each new token sees of its own block: the block being filled stays full precision)."""
        s, bs = plan.seqs[i], self.bs
        refs = plan.fresh_refs(i, bs)
        out = torch.empty(2, len(refs), bs, self.kv_heads, self.head_dim, dtype=dtype)
        for j, ref in enumerate(refs):
            out[:, j] = self.staging[:, ref] if ref >= 0 else self.fresh[:, -1 - ref]
        return out.view(2, -1, self.kv_heads, self.head_dim)[:, :s.ctx - s.start // bs * bs]

    def decode_blocks(self, block_ids: torch.Tensor, out: torch.Tensor) -> None:
        """out: [2, m, bs, kv_heads, head_dim] <- the sealed blocks block_ids, decoded."""
        for i, part in enumerate(("k", "v")):
            fields = {name: _bytes(t).index_select(0, block_ids).view(t.dtype) for name, t in self.store[part].items()}
            out[i] = getattr(self.codec, part).decode(fields)

    def read(self, plan: StepPlan, i: int, start: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """[2, n, kv_heads, head_dim]: sequence i's K and V at positions [start, ctx), in the cache's
        (rotated, for KVarN) space; only the blocks it covers are decoded."""
        s, bs = plan.seqs[i], self.bs
        nb, first = s.block_ids.numel(), start // bs
        out = torch.empty(2, nb - first, bs, self.kv_heads, self.head_dim, dtype=dtype)
        j = first
        if j == 0 and s.sink_slot >= 0:
            out[:, 0] = self.staging[:, s.sink_slot]
            j = 1
        end = nb - 1 if s.tail_slot >= 0 else nb
        if end > j:
            self.decode_blocks(s.block_ids[j:end], out[:, j - first:end - first])
        if s.tail_slot >= 0 and nb - 1 >= j:
            out[:, nb - 1 - first] = self.staging[:, s.tail_slot]
        off = start - first * bs
        return out.view(2, -1, self.kv_heads, self.head_dim)[:, off:off + s.ctx - start]
