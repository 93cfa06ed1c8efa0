"""The quantized paged cache: what a sequence reads back is exact (sealed blocks = decode(encode(the
f16 block)), the block being filled and KVarN's first block = f16), whatever the chunking; shared
prefix blocks are read the same by every request; and the allocator's bytes equal `hearth plan`'s."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from hearth.backends.base import Backend
from hearth.config import ModelConfig
from hearth.kvstore.codecs import ALL_CODECS, QUANTIZED, get_codec
from hearth.kvstore.paged import QuantizedKVCache, StagingTable
from hearth.memory.kv_cache import engine_pool
from hearth.memory.shape import ModelShape
from hearth.runner.model_runner import ModelRunner

NO_MODEL = SimpleNamespace(backend=Backend())  # the runner asks only for the backend here

KVH, D = 2, 64


def block_size(name: str) -> int:
    return 64 if name.startswith("kvarn") else 16


def setup(name: str, slots: int = 2, blocks: int = 8):
    codec = get_codec(name)
    bs = block_size(name)
    return codec, bs, StagingTable(bs, slots, codec.sink), QuantizedKVCache(codec, blocks, bs, KVH, D, slots)


def fill(table, cache, rid, table_ids, kv, chunks, start=0):
    p, plan = start, None
    for n in chunks:
        plan = table.plan([(rid, p, n, table_ids)], [0, n])
        cache.write(kv[p:p + n], plan)
        p += n
    return plan


def expected(codec, kv: torch.Tensor, bs: int) -> torch.Tensor:
    """[2, ctx, KVH, D]: what reads must return (in the codec's rotated space)."""
    x = kv.float() @ codec.rotation(D) if codec.rotate else kv.float()
    x = x.half().float().transpose(0, 1)  # [2, ctx, KVH, D], staged values are f16
    out, ctx = x.clone(), x.shape[1]
    for j in range(ctx // bs):
        if codec.sink and j == 0:
            continue
        block = x[:, j * bs:(j + 1) * bs].unsqueeze(1)  # [2, 1, bs, KVH, D]
        out[0, j * bs:(j + 1) * bs] = codec.k.decode(codec.k.encode(block[0]))[0]
        out[1, j * bs:(j + 1) * bs] = codec.v.decode(codec.v.encode(block[1]))[0]
    return out


@pytest.mark.parametrize("name", list(QUANTIZED))
def test_reads_are_exact_whatever_the_chunking(name):
    codec, bs, _, _ = setup(name)
    ctx = 3 * bs + 5
    kv = torch.randn(ctx, 2, KVH, D)
    want = expected(codec, kv, bs)
    blocks = [5, 2, 7, 0]
    for chunks in ([ctx], [7, 2 * bs, 1, 1, ctx - 2 * bs - 9], [bs - 1, 1, bs, bs + 5]):
        _, _, table, cache = setup(name)
        plan = fill(table, cache, "a", blocks, kv, chunks)
        got = cache.read(plan, 0)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        # a window read (sliding layers) is a suffix of the same values
        torch.testing.assert_close(cache.read(plan, 0, ctx - bs - 3), want[:, ctx - bs - 3:], rtol=0, atol=0)


def test_token_by_token_decode_seals_each_block_once():
    codec, bs, table, cache = setup("q8_0")
    kv = torch.randn(2 * bs + 3, 2, KVH, D)
    plan = fill(table, cache, "a", [3, 4, 1], kv, [1] * kv.shape[0])
    torch.testing.assert_close(cache.read(plan, 0), expected(codec, kv, bs), rtol=0, atol=0)
    assert table.fill == {"a": table.fill["a"]} and len(table.free) == 1
    table.release("a")
    assert len(table.free) == 2


def test_shared_prefix_blocks_and_sink_copies():
    """KVarN: request b reuses a's two full blocks (prefix cache) and reads a's f16 first block; once
    no request owns that copy and slots run out, it is evicted and b's successors read it encoded."""
    codec, bs, table, cache = setup("kvarn_k4v2", slots=3)
    kv = torch.randn(2 * bs + 4, 2, KVH, D)
    fill(table, cache, "a", [0, 1, 2], kv, [2 * bs + 4])
    more = torch.randn(3, 2, KVH, D)
    plan = fill(table, cache, "b", [0, 1, 3], torch.cat([kv[:2 * bs], more]), [3], start=2 * bs)
    want = expected(codec, torch.cat([kv[:2 * bs], more]), bs)
    torch.testing.assert_close(cache.read(plan, 0), want, rtol=0, atol=0)
    table.release("a")
    table.release("b")
    for rid in ("c", "d", "e"):  # new requests take every slot: the unowned sink copy goes
        fill(table, cache, rid, [4 + "cde".index(rid)], torch.randn(5, 2, KVH, D), [5])
    assert 0 not in table.sinks
    plan = fill(table, cache, "f", [0, 1, 3], torch.cat([kv[:2 * bs], more]), [3], start=2 * bs)
    got = cache.read(plan, 0)
    first = expected(get_codec("kvarn_k4v2"), kv[:bs], bs)  # sink-less decode of block 0 ...
    enc = codec.k.decode(codec.k.encode((kv[:bs].float() @ codec.rotation(D)).half().float()[None, :, 0]))[0]
    torch.testing.assert_close(got[0, :bs], enc, rtol=0, atol=0)  # ... is what a reader now gets
    assert not torch.equal(got[0, :bs], first[0, :bs])


def test_staging_grows_past_the_planned_sequences():
    codec, bs, table, cache = setup("q4_0", slots=1)
    kvs = [torch.randn(5, 2, KVH, D) for _ in range(3)]
    seqs = [(f"r{i}", 0, 5, [i]) for i in range(3)]
    plan = table.plan(seqs, [0, 5, 10])
    cache.write(torch.cat(kvs), plan)
    assert cache.staging.shape[1] == 3
    for i in range(3):
        torch.testing.assert_close(cache.read(plan, i), kvs[i].half().float().transpose(0, 1), rtol=0, atol=0)


def _shape(cfg: ModelConfig) -> ModelShape:
    return ModelShape("t", cfg.arch, cfg.num_layers, cfg.hidden_size, cfg.num_heads, (cfg.num_kv_heads,) * cfg.num_layers,
                      cfg.head_dim, cfg.head_dim, cfg.intermediate_size, cfg.vocab_size, cfg.context_length)


@pytest.mark.parametrize("name", list(ALL_CODECS))
def test_allocator_bytes_equal_the_plans(name):
    cfg = ModelConfig("llama", num_layers=3, hidden_size=256, num_heads=4, num_kv_heads=2, head_dim=64,
                      intermediate_size=512, vocab_size=100, context_length=4096)
    codec = get_codec(name)
    bs, ctx, seqs = codec.block_size(None), 1000, 3
    pool = engine_pool(_shape(cfg), codec.format, bs, seqs, ctx)  # hearth.llm's blocks, staging reserve included
    assert pool.blocks >= seqs * -(-ctx // bs)
    runner = ModelRunner(NO_MODEL, cfg, pool.blocks, bs, codec, max_num_seqs=seqs)
    assert runner.kv_bytes == pool.bytes
