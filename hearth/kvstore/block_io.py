"""Whole KV blocks between a runner's cache tensors and bytes: the payloads of the disk tier and of
saved snapshots, in the cache's own format (nothing is re-encoded, so a block read back is
bit-identical to the one written).

A payload is one block of every layer, layer after layer, each layer at its own shape (LayerCache):
  a plain layer (f16, bf16; a short conv's input, f16 beside a quantized format's K/V): [parts, block_size,
  heads, dim] in its dtype; a KV-shared or recurrent layer: nothing;
  a quantized layer: K's fields then V's fields in codec order, each one block's raw bytes;
  then, for a KVarN first block whose f16 copy ("sink") is kept, per quantized layer [2, bs, kvh, hd] f16,
  so a restored first block is read exactly as the request that computed it read it."""

from __future__ import annotations

import torch

from hearth.config import ModelConfig, layer_caches
from hearth.kvstore.codecs import PlainCodec, QuantCodec, cache_block_bytes, cache_staging_bytes
from hearth.kvstore.disk_format import BlockFormat
from hearth.kvstore.paged import QuantizedKVCache, StagingTable


def block_format(codec: PlainCodec | QuantCodec, cfg: ModelConfig, block_size: int) -> BlockFormat:
    caches = layer_caches(cfg)
    base = cache_block_bytes(codec, caches, block_size)
    sizes = (base,)
    if codec.quantized and codec.sink:  # one f16 block of each layer's staging: the sink copy
        sizes += (base + cache_staging_bytes(codec, caches, block_size) // codec.staging_blocks,)
    return BlockFormat(codec.name, block_size, cfg.num_layers, sizes)


def _rows(t: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """A raw-byte view of a contiguous tensor with blocks along `dim`: [..., num_blocks, bytes] (bytes named, not
    inferred: a recurrent layer's cache holds none)."""
    return t.view(torch.uint8).reshape(*t.shape[:dim + 1], t[(0,) * (dim + 1)].numel() * t.element_size()
                                       if t.numel() else 0)


def _layer_rows(cache) -> list[torch.Tensor]:
    """One layer's [num_blocks, bytes] raw views in payload order: a QuantizedKVCache's fields (K's, then V's), a
    plain tensor's parts ([parts, num_blocks, ...]: K then V, or a conv's input; none for 0 parts)."""
    if isinstance(cache, QuantizedKVCache):
        return [_rows(t) for part in ("k", "v") for t in cache.store[part].values()]
    return list(_rows(cache, 1).unbind(0))


def _joined(payloads: list, start: int, stop: int) -> torch.Tensor:
    """[n, stop - start] uint8: the same byte range of every payload, in one writable buffer."""
    buf = bytearray().join(memoryview(p)[start:stop] for p in payloads)
    return torch.frombuffer(buf, dtype=torch.uint8).view(len(payloads), stop - start)


class BlockIO:
    def __init__(self, kv_caches: list, staging: StagingTable | None, fmt: BlockFormat):
        # every run of per-block bytes, layer after layer ([num_blocks, bytes]; a KV-shared or recurrent layer's
        # cache holds nothing: its blocks are its source's, its state a slot's)
        self.rows = [r for c in kv_caches for r in _layer_rows(c)]
        self.quantized = [c for c in kv_caches if isinstance(c, QuantizedKVCache)]  # the layers with f16 sinks
        self.staging, self.fmt = staging, fmt

    def regions(self) -> list[tuple[torch.Tensor, int, int]]:
        """(tensor, address of block 0, bytes per block) of each run of consecutive blocks: each part of a plain
        layer, each codec field of a quantized one."""
        return [(r, r.data_ptr(), r.shape[1]) for r in self.rows if r.shape[1]]

    @torch.inference_mode()
    def export(self, block_ids: list[int]) -> list[bytes]:
        """The payload of each block (its content as the last step left it)."""
        ids = torch.tensor(block_ids, dtype=torch.long)
        rows = torch.cat([r.index_select(0, ids) for r in self.rows], 1)  # [n, block bytes, all layers]
        out = [bytes(r) for r in rows.contiguous().numpy()]
        sinks = self.staging.sinks if self.staging is not None else {}
        for i, block in enumerate(block_ids):
            if block in sinks:  # each quantized layer's [2, bs, kvh, hd] f16, layer after layer
                copy = torch.cat([c.staging[:, sinks[block]].reshape(-1) for c in self.quantized])
                out[i] += copy.contiguous().view(torch.uint8).numpy().tobytes()
        return out

    @torch.inference_mode()
    def load(self, loads: list[tuple[int, bytes]]) -> None:
        """Write verified payloads into the given (freshly allocated) blocks."""
        ids = torch.tensor([b for b, _ in loads], dtype=torch.long)
        base = self.fmt.block_bytes
        rows, off = _joined([p for _, p in loads], 0, base), 0
        for r in self.rows:
            r.index_copy_(0, ids, rows[:, off:off + r.shape[1]])
            off += r.shape[1]
        if self.staging is not None:
            self._load_sinks(loads, base)

    def _load_sinks(self, loads: list[tuple[int, bytes]], base: int) -> None:
        """A reused block id's old f16 copy is stale; a payload that carries one brings it back."""
        for block, payload in loads:
            self.staging.forget_sink(block)
            if len(payload) == base:
                continue
            slot = self.staging.adopt_sink(block)
            copy, off = _joined([payload], base, len(payload)).view(-1), 0
            for c in self.quantized:
                c.ensure_slots(self.staging.capacity)
                dst = c.staging[:, slot]  # [2, bs, kvh, hd] f16
                n = dst.numel() * dst.element_size()
                dst.copy_(copy[off:off + n].view(dst.dtype).view(dst.shape))
                off += n
