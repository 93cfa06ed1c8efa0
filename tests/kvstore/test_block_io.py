"""Blocks read out of one cache and loaded into another, at another block id, are bit-identical in
every layer, for plain and quantized formats; a KVarN first block brings its f16 copy along and a
reused block id's stale copy is dropped."""

from __future__ import annotations

import pytest
import torch

from hearth.config import ModelConfig
from hearth.kvstore.block_io import BlockIO, block_format
from hearth.kvstore.codecs import get_codec
from hearth.kvstore.paged import QuantizedKVCache, StagingTable

CFG = ModelConfig("llama", num_layers=2, hidden_size=128, num_heads=4, num_kv_heads=2, head_dim=64,
                  intermediate_size=256, vocab_size=100, context_length=512)


def caches(name: str, blocks: int = 8):
    codec = get_codec(name)
    bs = codec.block_size(None)
    torch.manual_seed(0)
    if not codec.quantized:
        kv = [torch.randn(codec.shape(blocks, bs, CFG.num_kv_heads, CFG.head_dim)).to(codec.dtype)
              for _ in range(CFG.num_layers)]
        return kv, None, block_format(codec, CFG, bs)
    staging = StagingTable(bs, 2, codec.sink)
    kv = [QuantizedKVCache(codec, blocks, bs, CFG.num_kv_heads, CFG.head_dim, 2) for _ in range(CFG.num_layers)]
    for c in kv:
        for part in c.store.values():
            for t in part.values():
                t.view(torch.uint8).copy_(torch.randint(0, 256, t.view(torch.uint8).shape, dtype=torch.uint8))
        c.staging.copy_(torch.randn(c.staging.shape))
    return kv, staging, block_format(codec, CFG, bs)


def block_bytes(kv, block: int) -> list[torch.Tensor]:
    if isinstance(kv[0], torch.Tensor):
        return [c[:, block].clone() for c in kv]
    return [t[block].clone() for c in kv for part in c.store.values() for t in part.values()]


@pytest.mark.parametrize("name", ["f16", "bf16", "fp8_e4m3", "q8_0", "kvarn_k4v2"])
def test_export_then_load_elsewhere_is_bit_identical(name):
    src, src_staging, fmt = caches(name)
    dst, dst_staging, _ = caches(name)
    payloads = BlockIO(src, src_staging, fmt).export([3, 1])
    assert [len(p) for p in payloads] == [fmt.block_bytes] * 2
    BlockIO(dst, dst_staging, fmt).load([(6, payloads[0]), (2, payloads[1])])
    for a, b in zip(block_bytes(src, 3) + block_bytes(src, 1), block_bytes(dst, 6) + block_bytes(dst, 2)):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def test_kvarn_first_block_carries_its_f16_copy():
    src, src_staging, fmt = caches("kvarn_k4v2")
    dst, dst_staging, _ = caches("kvarn_k4v2")
    slot = src_staging.adopt_sink(3)
    payload = BlockIO(src, src_staging, fmt).export([3])[0]
    assert len(payload) == fmt.payload_sizes[1]
    dst_staging.adopt_sink(5)  # a stale copy of whatever block 5 held before
    io = BlockIO(dst, dst_staging, fmt)
    io.load([(6, payload), (5, BlockIO(src, src_staging, fmt).export([1])[0])])
    assert 5 not in dst_staging.sinks and 6 in dst_staging.sinks
    for a, b in zip(src, dst):
        assert torch.equal(a.staging[:, slot], b.staging[:, dst_staging.sinks[6]])
