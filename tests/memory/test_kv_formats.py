"""KV bytes per token, hand-computed: every format, whole models (no GQA, GQA, MoE, sliding), what
hearth's pool holds and what a decode step reads."""

from __future__ import annotations

import pytest

from hearth.errors import HearthError
from hearth.memory import PlanError
from hearth.memory.describe import describe
from hearth.memory.kv_cache import engine_pool, kv_bytes_read, staging_bytes, token_bytes
from hearth.memory.kv_formats import kv_format

# one layer, 8 KV heads x head_dim 128, K and V: (format, block/tile size, bytes per token)
FORMATS = [
    ("f32", 16, 2 * 8 * 128 * 4),                 # 8,192
    ("f16", 16, 2 * 8 * 128 * 2),                 # 4,096
    ("bf16", 16, 2 * 8 * 128 * 2),                # 4,096
    ("auto", 16, 2 * 8 * 128 * 2),                # auto = f16, the dtype hearth's cache uses
    ("fp8_e4m3", 16, 2 * 8 * (128 + 4 / 16)),     # 128 bytes + a 4-byte scale per 16-token block: 2,052
    ("q8_0", 16, 2 * 8 * (128 // 32) * 34),       # 4 blocks of 34 bytes per head vector: 2,176
    ("q4_0", 16, 2 * 8 * (128 // 32) * 18),       # 4 blocks of 18 bytes: 1,152
    # K: 128 x 4 bits = 64 B + (f16 scale + f16 zero) per channel per 128-token tile = 128 x 4 / 128 = 4 B
    #    + an f16 normalization scale per token = 2 B
    # V: 128 x 2 bits = 32 B + f16 scale + f16 zero per token = 4 B + an f16 scale per channel per tile
    #    = 128 x 2 / 128 = 2 B
    ("kvarn_k4v2", 128, 8 * ((64 + 4 + 2) + (32 + 4 + 2))),   # 864
    ("kvarn_k4v2", 64, 8 * ((64 + 8 + 2) + (32 + 4 + 4))),    # a 64-token tile doubles the per-tile parts: 912
    ("kvarn_k4v4", 128, 8 * ((64 + 4 + 2) + (64 + 4 + 2))),   # 1,120
]


@pytest.mark.parametrize("name,block,expected", FORMATS)
def test_format_bytes_per_token_per_layer(name, block, expected):
    assert kv_format(name).token_layer_bytes(8, 128, 128, block) == expected


def test_kvarn_k4v2_is_at_most_a_quarter_of_f16():
    # issue 6 asks for <= 0.25x of f16 (864 / 4,096 = 0.211 at head_dim 128; 57.5 / 256 = 0.225 at 64 with a 64 tile)
    for head_dim, tile in ((128, 128), (64, 64)):
        ratio = kv_format("kvarn_k4v2").token_layer_bytes(1, head_dim, head_dim, tile) / (4 * head_dim)
        assert ratio <= 0.25


def test_ggml_block_formats_need_whole_blocks():
    with pytest.raises(PlanError, match="multiple of the 32"):
        kv_format("q4_0").token_layer_bytes(8, 80, 80, 16)


def test_kvarn_needs_its_tile_size():
    assert kv_format("kvarn_k4v4").block_size(None, 16) == 128
    assert kv_format("q8_0").block_size(None, 16) == 16
    with pytest.raises(PlanError, match="128 or 64"):
        kv_format("kvarn_k4v2").block_size(32, 16)


def test_staging_blocks():
    shape, _ = describe("llama-70b")
    # KVarN keeps the sink block and the block being filled in f16: 2 x 128 tokens x 80 layers x 4,096 B
    assert staging_bytes(shape, kv_format("kvarn_k4v2"), 128) == 2 * 128 * 80 * 4096
    # other quantized formats stage only the block being filled: 16 tokens x 80 x 4,096
    assert staging_bytes(shape, kv_format("q4_0"), 16) == 16 * 80 * 4096
    assert staging_bytes(shape, kv_format("f16"), 16) == 0


# (model, format, bytes a token takes in hearth's pool: every layer)
MODELS = [
    # llama 7B, no GQA: 32 layers x 2 (K, V) x 32 heads x 128 x 2 B = 524,288 (512 KiB)
    ("llama-7b", "f16", 32 * 2 * 32 * 128 * 2),
    # llama 70B, GQA 8 KV heads: 80 x 2 x 8 x 128 x 2 = 327,680
    ("llama-70b", "f16", 80 * 2 * 8 * 128 * 2),
    # same with q8_0: 80 x 2 x 8 x (4 x 34) = 174,080
    ("llama-70b", "q8_0", 80 * 2 * 8 * 136),
    # Mixtral 8x7B: experts do not touch KV: 32 x 2 x 8 x 128 x 2 = 131,072
    ("mixtral-8x7b", "f16", 32 * 2 * 8 * 128 * 2),
    # gemma3 27B: 62 layers, 16 KV heads x 128: 8,192 B a layer-token. 52 of them slide over 1,024
    # tokens, but a block of hearth's pool holds every layer (hearth.llm): 62 x 8,192 = 507,904
    ("gemma3-27b", "f16", 62 * 8192),
]


@pytest.mark.parametrize("preset,fmt,expected", MODELS)
def test_model_bytes_per_token(preset, fmt, expected):
    shape, _ = describe(preset)
    assert token_bytes(shape, kv_format(fmt), 16) == expected


def test_sliding_layers_cap_what_a_decode_reads():
    shape, _ = describe("gemma3-27b")
    assert shape.num_sliding == 52
    f16 = kv_format("f16")
    # every 6th layer is global (10), 52 read only their window. At 8,192 tokens:
    # 10 x 8,192 x 8,192 + 52 x 8,192 x 1,024 = 135,168 B a token of the context
    assert kv_bytes_read(shape, f16, 16, 8192) == 8192 * 135_168
    # within the window every layer reads every token
    assert kv_bytes_read(shape, f16, 16, 1024) == 1024 * 62 * 8192
    # past the window only the 10 global layers read more: 10 x 8,192 B per extra token
    assert kv_bytes_read(shape, f16, 16, 9000) - kv_bytes_read(shape, f16, 16, 8000) == 1000 * 10 * 8192


def test_the_pool_is_whole_blocks_of_every_layer():
    shape, _ = describe("llama-7b")
    # 1,000 tokens take ceil(1000 / 16) = 63 blocks = 1,008 token slots of 524,288 B
    assert engine_pool(shape, kv_format("f16"), 16, 1, 1000).bytes == 1008 * 524288
    gemma, _ = describe("gemma3-27b")  # sliding layers hold whole blocks too: 62 layers, not 10 + a window
    assert engine_pool(gemma, kv_format("f16"), 16, 2, 8192).bytes == 2 * 8192 * 62 * 8192


def test_a_quantized_pool_adds_each_sequences_staging_once():
    """hearth.llm: a q4_0 block of llama 70B is 16 x 80 x 1,152 B and its f16 staging 16 x 80 x 4,096 B
    per sequence: the pool is the sequences' blocks, the staging comes beside it, and no block is
    held for it (until 2026-12-06: 4 more blocks per sequence, never written, 2 x (63 + 4) blocks),
    so one sequence holds the whole pool. Under a memory bound the staging comes out of it."""
    shape, _ = describe("llama-70b")
    q4 = kv_format("q4_0")
    block, stage = 16 * 80 * 1152, 16 * 80 * 4096
    assert staging_bytes(shape, q4, 16) == stage and staging_bytes(shape, kv_format("f16"), 16) == 0
    pool = engine_pool(shape, q4, 16, 2, 1000)
    assert (pool.blocks, pool.bytes, pool.context) == (2 * 63, 2 * 63 * block + 2 * stage, 2 * 63 * 16)
    # 1 GiB: (2**30 - 2 x 5,242,880) // 1,474,560 = 721 blocks (was 2**30 // 1,474,560 = 728, 8 of them reserve)
    bound = engine_pool(shape, q4, 16, 2, 100_000, kv_cache_memory_gb=1)
    assert (bound.blocks, bound.context) == (721, 721 * 16) and bound.bytes <= 2**30
    assert engine_pool(shape, q4, 16, 2, 1000, num_kv_blocks=50).blocks == 50  # was 50 + 2 x 4
    # staging that takes the whole bound: an error naming both settings (it was a one-block pool)
    with pytest.raises(HearthError, match=r"raise --kv-cache-memory-gb or lower --max-num-seqs$"):
        engine_pool(shape, q4, 16, 205, 1000, kv_cache_memory_gb=1)  # 205 x 5 MiB of staging > 1 GiB
