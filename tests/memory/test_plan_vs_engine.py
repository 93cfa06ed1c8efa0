"""`hearth plan`'s KV cache, max context and max concurrency are what hearth's own engine allocates
and holds: tiny GGUFs, real `LLM`s, their runner's KV bytes and their KV manager's blocks. The plan
once counted only the window of a sliding-window layer (the pool's blocks hold every layer) and left
out a quantized format's staging reserve blocks, so it promised contexts and batches the engine
could not hold (3.7x too much for this gemma3)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hearth.engine.request import Request
from hearth.memory.devices import get_device
from hearth.memory.planner import plan
from hearth.memory.request import build_request
from hearth.sampling_params import SamplingParams
from tests.gguf_factory import write_tiny_gguf

CTX, SEQS = 512, 3
BATCH_TOKENS = 64  # a small step: the activations stop growing early, so KV decides the limits


@pytest.fixture(scope="module")
def engines():
    """(path, kv, ctx, seqs) -> the LLM hearth serves that file with, built once."""
    from hearth.llm import LLM

    built = {}

    def get(path, kv: str, ctx: int, seqs: int):
        key = (str(path), kv, ctx, seqs)
        if key not in built:  # a memory bound far above what these want: the pool is what they ask for
            built[key] = LLM(str(path), max_model_len=ctx, max_num_seqs=seqs, kv_cache_dtype=kv,
                             kv_cache_memory_gb=64, progress=False)
        return built[key]

    return get


def holds(llm, seqs: int, tokens: int) -> bool:
    """seqs requests of `tokens` tokens all get their blocks at once."""
    kv = llm.engine.scheduler.kv
    reqs = [Request(f"r{i}", [1 + i] * tokens, SamplingParams(), frozenset(), tokens) for i in range(seqs)]
    ok = all(kv.allocate_slots(r, tokens) for r in reqs)
    for r in reqs:
        kv.free(r)
    return ok


@pytest.mark.parametrize("arch,kv", [("llama", "f16"), ("llama", "q8_0"), ("gemma3", "f16")])
def test_the_plan_is_what_the_engine_allocates_and_holds(tmp_path, engines, arch, kv):
    path = tmp_path / f"{arch}.gguf"  # llama with head_dim 32: q8_0's blocks fit; gemma3: 5 of 6 layers slide
    dims = dict(hidden=128, heads=4, kv_heads=2, head_dim=32) if arch == "llama" else dict(sliding_window=64)
    write_tiny_gguf(path, arch, context=2048, **dims)
    req = build_request(str(path), device="H100 SXM", ctx=CTX, concurrency=SEQS, kv_cache_dtype=kv,
                        batch_tokens=BATCH_TOKENS)

    def planned(ctx: int, seqs: int, memory: int = 2**40):
        return plan(replace(req, ctx=ctx, concurrency=seqs, device=replace(req.device, memory_bytes=memory)))

    def engine_kv(ctx: int, seqs: int) -> int:
        return engines(path, kv, ctx, seqs).runner.kv_bytes

    def rest(ctx: int, seqs: int) -> float:  # weights, activations, runtime: the plan's, not under test here
        p = planned(ctx, seqs)
        return p["total_bytes"] - p["kv_cache_bytes"]

    p = planned(CTX, SEQS)
    assert p["kv_cache_bytes"] == engine_kv(CTX, SEQS)
    assert p["kv_bytes_per_token"] * CTX * SEQS <= p["kv_cache_bytes"]  # every layer's, never a window's
    # a device with room for the engine's 3 sequences and half of a fourth
    usable = int(rest(CTX, SEQS) + engine_kv(CTX, SEQS) + engine_kv(CTX, 1) // 2)
    p = planned(CTX, SEQS, usable)
    assert get_device("H100 SXM").kind == p.request.device.kind and p["usable_bytes"] == usable and p["fits"]

    def engine_fits(ctx: int, seqs: int) -> bool:
        return rest(ctx, seqs) + engine_kv(ctx, seqs) <= usable

    top = p["max_context"]  # with SEQS sequences: the engine holds them, one token more does not fit
    assert CTX <= top < 2048 and engine_fits(top, SEQS) and not engine_fits(top + 1, SEQS)
    llm = engines(path, kv, top, SEQS)
    assert llm.max_model_len == top and holds(llm, SEQS, top) and not holds(llm, SEQS + 1, top)
    most = p["max_concurrency"]  # of CTX-token sequences: the engine holds them, one more does not fit
    assert most >= SEQS and engine_fits(CTX, most) and not engine_fits(CTX, most + 1)
    assert holds(engines(path, kv, CTX, most), most, CTX)


def test_a_quantized_cache_pays_its_staging_once(tmp_path, engines):
    """q8_0 on a tiny llama (2 layers, 2 KV heads of 32): a 16-token block is 2 x 2 x 16 x 2 x 34 B =
    4,352 B of the pool and a sequence's f16 staging 2 x 2 x 16 x 2 x 64 B = 8,192 B beside it. The
    pool is the sequences' 3 x 32 blocks, all of them for context: until 2026-12-06 each running
    sequence also held ceil(8,192 / 4,352) = 2 blocks, never written, for the staging it has anyway
    (102 blocks, of which one sequence could take 100)."""
    path = tmp_path / "llama.gguf"
    write_tiny_gguf(path, "llama", context=2048, hidden=128, heads=4, kv_heads=2, head_dim=32)
    llm = engines(path, "q8_0", CTX, SEQS)
    mc = llm.model_config
    assert (mc.num_layers, mc.num_kv_heads, mc.head_dim, llm.config.block_size) == (2, 2, 32, 16)
    kv = llm.engine.scheduler.kv
    assert kv.pool.num_blocks == SEQS * CTX // 16 == 96
    assert llm.runner.kv_bytes == 96 * 4352 + SEQS * 8192
    assert holds(llm, 1, 96 * 16) and holds(llm, SEQS, CTX)  # one sequence may take every block
