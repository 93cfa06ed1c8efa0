"""Whole KV blocks between a runner's cache tensors and bytes: the payloads of the disk tier and of
saved snapshots, in the cache's own format (nothing is re-encoded, so a block read back is
bit-identical to the one written).

A payload is one block of every layer, layer after layer:
  plain (f16, bf16): per layer [parts, block_size, heads, dim] in the cache's dtype (LayerCache: K and V, or
  a short conv's input);
  quantized: per layer K's fields then V's fields in codec order, each one block's raw bytes;
  then, for a KVarN first block whose f16 copy ("sink") is kept, per layer [2, bs, kvh, hd] f16,
  so a restored first block is read exactly as the request that computed it read it."""

from __future__ import annotations

import torch

from hearth.config import ModelConfig, layer_caches
from hearth.kvstore.codecs import STAGING_DTYPE, PlainCodec, QuantCodec, cache_block_bytes
from hearth.kvstore.disk_format import BlockFormat
from hearth.kvstore.paged import QuantizedKVCache, StagingTable


def block_format(codec: PlainCodec | QuantCodec, cfg: ModelConfig, block_size: int) -> BlockFormat:
    base = cache_block_bytes(codec, layer_caches(cfg), block_size)
    sizes = (base,)
    if codec.quantized and codec.sink:
        sizes += (base + cfg.num_layers * 2 * block_size * cfg.num_kv_heads * cfg.head_dim * STAGING_DTYPE.itemsize,)
    return BlockFormat(codec.name, block_size, cfg.num_layers, sizes)


def _rows(t: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """A raw-byte view of a contiguous tensor with blocks along `dim`: [..., num_blocks, bytes] (bytes named, not
    inferred: a recurrent layer's cache holds none)."""
    return t.view(torch.uint8).reshape(*t.shape[:dim + 1], t[(0,) * (dim + 1)].numel() * t.element_size()
                                       if t.numel() else 0)


def _joined(payloads: list, start: int, stop: int) -> torch.Tensor:
    """[n, stop - start] uint8: the same byte range of every payload, in one writable buffer."""
    buf = bytearray().join(memoryview(p)[start:stop] for p in payloads)
    return torch.frombuffer(buf, dtype=torch.uint8).view(len(payloads), stop - start)


class BlockIO:
    def __init__(self, kv_caches: list, staging: StagingTable | None, fmt: BlockFormat):
        # a KV-shared layer's cache holds nothing (0 parts): its blocks are its source's
        self.caches = [c for c in kv_caches if not (isinstance(c, torch.Tensor) and c.numel() == 0)]
        self.staging, self.fmt = staging, fmt
        self.quantized = isinstance(kv_caches[0], QuantizedKVCache)

    def regions(self) -> list[tuple[torch.Tensor, int, int]]:
        """(tensor, address of block 0, bytes per block) of each run of consecutive blocks: a layer's
        K and V (plain), or each codec field of each layer (quantized)."""
        if not self.quantized:
            return [(c, r.data_ptr(), r.shape[1]) for c in self.caches for r in _rows(c, 1)]
        return [(f, f.data_ptr(), f.shape[1]) for f in self._fields()]

    def _fields(self) -> list[torch.Tensor]:
        """Per layer, per part, per field: [num_blocks, bytes] views, in payload order."""
        return [_rows(t) for c in self.caches for part in ("k", "v") for t in c.store[part].values()]

    @torch.inference_mode()
    def export(self, block_ids: list[int]) -> list[bytes]:
        """The payload of each block (its content as the last step left it)."""
        ids = torch.tensor(block_ids, dtype=torch.long)
        if not self.quantized:  # per layer [parts, n, B] -> [n, parts * B]; layers side by side (they differ: lfm2)
            rows = torch.cat([(r := _rows(c, 1)).index_select(1, ids).transpose(0, 1).reshape(len(block_ids),
                                                                                              r.shape[0] * r.shape[2])
                              for c in self.caches], 1)
        else:
            rows = torch.cat([f.index_select(0, ids) for f in self._fields()], 1)  # [n, L * block bytes]
        out = [bytes(r) for r in rows.contiguous().numpy()]
        sinks = self.staging.sinks if self.staging is not None else {}
        for i, block in enumerate(block_ids):
            if block in sinks:
                copy = torch.stack([c.staging[:, sinks[block]] for c in self.caches])  # [L, 2, bs, kvh, hd]
                out[i] += copy.contiguous().view(torch.uint8).numpy().tobytes()
        return out

    @torch.inference_mode()
    def load(self, loads: list[tuple[int, bytes]]) -> None:
        """Write verified payloads into the given (freshly allocated) blocks."""
        ids = torch.tensor([b for b, _ in loads], dtype=torch.long)
        payloads = [p for _, p in loads]
        base = self.fmt.block_bytes
        rows = _joined(payloads, 0, base)
        if not self.quantized:
            off = 0
            for c in self.caches:  # [parts, num_blocks, B] <- this layer's [n, parts * B] of the payloads
                view = _rows(c, 1)
                size = view.shape[0] * view.shape[2]
                view.index_copy_(1, ids, rows[:, off:off + size].reshape(len(loads), view.shape[0], -1).transpose(0, 1))
                off += size
            return
        off = 0
        for f in self._fields():
            f.index_copy_(0, ids, rows[:, off:off + f.shape[1]])
            off += f.shape[1]
        self._load_sinks(loads, base)

    def _load_sinks(self, loads: list[tuple[int, bytes]], base: int) -> None:
        """A reused block id's old f16 copy is stale; a payload that carries one brings it back."""
        for block, payload in loads:
            self.staging.forget_sink(block)
            if len(payload) == base:
                continue
            slot = self.staging.adopt_sink(block)
            copy = _joined([payload], base, len(payload)).view(STAGING_DTYPE)
            for layer, c in enumerate(self.caches):
                c.ensure_slots(self.staging.capacity)
                c.staging[:, slot] = copy.view(len(self.caches), *c.staging[:, slot].shape)[layer]
