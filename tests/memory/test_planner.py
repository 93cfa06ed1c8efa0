"""The planner's answers on datasheet devices, hand-computed, and its limits checked against the
same arithmetic that says `fits`."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hearth.memory import PlanError
from hearth.memory.devices import get_device
from hearth.memory.kv_formats import kv_format
from hearth.memory.model_input import from_description
from hearth.memory.planner import PlanRequest, plan

GiB = 2**30


def make(model: str, device: str, ctx: int, concurrency: int = 1, kv: str = "f16", block: int = 16,
         **device_overrides):
    m = from_description(model)
    return plan(PlanRequest(m.shape, m.tensors, m.weights_source, get_device(device, **device_overrides), ctx,
                            concurrency, kv_format(kv), block, 2048))


# Llama 2 7B, F16 weights (see test_weights.py): 13,477,363,712 bytes; 13,215,227,904 read per
# decode token (all but the embedding table, plus one 8,192-byte row); KV 524,288 B/token.
LLAMA7B_F16 = 13_477_363_712
LLAMA7B_DECODE_WEIGHTS = 13_215_227_904


def test_llama_7b_decode_and_prefill_ceilings_on_h100():
    p = make("llama-7b,quant=F16", "H100 SXM", ctx=4096)
    # decode reads 13,215,227,904 + 4,096 x 524,288 (= 2,147,483,648 of KV) = 15,362,711,552 B a token
    assert p["decode_bytes_per_token"] == 15_362_711_552
    assert p["decode_tok_s_ceiling"] == pytest.approx(3.35e12 / 15_362_711_552)  # 218.1 tok/s
    # prefill: 2 x 6,476,005,376 weights (no embedding, no head) = 12,952,010,752 FLOPs + attention:
    # 2 x 32 heads x (128 + 128) = 16,384 FLOPs a key, x mean keys (4,097 / 2) x 32 layers = 1,074,003,968
    assert p["prefill_flops_per_token"] == 12_952_010_752 + 1_074_003_968
    assert p["prefill_tok_s_ceiling"] == pytest.approx(989e12 / 14_026_014_720)  # 70,511 tok/s, compute-bound
    assert "compute-bound" in p.figures["prefill_tok_s_ceiling"].reason
    assert "memory-bound" in p.figures["decode_tok_s_ceiling"].reason
    assert "/s dense bf16: NVIDIA H100 SXM datasheet" in p.figures["peak_flops"].reason and "int8_ops" not in p.figures


@pytest.mark.parametrize("quant,int8", [("Q4_K_M", True), ("Q8_0", True), ("F16", False), ("BF16", False)])
def test_quantized_prefills_run_at_the_int8_dot_rate(quant, int8):
    """This machine's CPU kernels multiply GGUF block types on int8 dots (measured apart from the bf16
    matmul): a prefill of such weights is bounded by that rate, of F16/BF16 weights by the matmul's."""
    m = from_description(f"llama-7b,quant={quant}")
    device = replace(get_device("H100 SXM"), peak_flops=100e9, int8_ops=400e9)
    p = plan(PlanRequest(m.shape, m.tensors, m.weights_source, device, 4096, 1, kv_format("f16"), 16, 2048))
    rate = 400e9 if int8 else 100e9
    assert p["prefill_tok_s_ceiling"] == pytest.approx(rate / p["prefill_flops_per_token"])
    assert ("of int8 dot products" if int8 else "of dense bf16") in p.figures["prefill_tok_s_ceiling"].reason
    assert p["int8_ops"] == 400e9 and "int8 dot products of the CPU kernels" in p.figures["int8_ops"].reason


def test_llama_7b_concurrency_on_a100_by_hand():
    """A100 80GB: usable 80 GiB = 85,899,345,920; runtime 1 GiB; activations: 2,048 tokens x
    (4 x 4,096 + 2 x 12,288 + 4 x 11,008 = 84,992 values) x 2 B = 348,127,232, plus 32,000 x 12 B
    of logits per sequence. No tokenizer: it lives in host memory, not the GPU's.
    Free for sequences: 85,899,345,920 - 1,073,741,824 - 13,477,363,712 - 348,127,232
    = 71,000,113,152; each 4,096-token sequence takes 2,147,483,648 + 384,000 = 2,147,867,648
    -> 33 of them (33.06)."""
    p = make("llama-7b,quant=F16", "A100 80GB", ctx=4096, concurrency=33)
    assert p["weight_bytes"] == p["resident_weight_bytes"] == LLAMA7B_F16  # GPUs hold the file's blocks
    assert p["activation_bytes"] == 348_127_232 + 33 * 384_000 and p["tokenizer_bytes"] == 0
    assert p["max_concurrency"] == 33 and p["fits"]
    assert not make("llama-7b,quant=F16", "A100 80GB", ctx=4096, concurrency=34)["fits"]
    # 34 sequences: (71,000,113,152 - 34 x 384,000) / (34 x 524,288 B a token) = 3,982.3 tokens,
    # in whole 16-token blocks: 248 x 16 = 3,968
    assert make("llama-7b,quant=F16", "A100 80GB", ctx=1024, concurrency=34)["max_context"] == 3968


@pytest.mark.parametrize("model,device,ctx,conc,kv", [
    ("llama-70b", "H100 SXM", 8192, 4, "f16"),
    ("llama-70b", "H200", 32768, 2, "kvarn_k4v2"),
    ("mixtral-8x7b", "M2 Ultra", 32768, 3, "q8_0"),
    ("gemma3-27b", "RTX 5090", 4096, 2, "q4_0"),
    ("qwen3-30b-a3b", "M4 Max", 40960, 1, "fp8_e4m3"),
])
def test_limits_are_the_edge_of_fits(model, device, ctx, conc, kv):
    block = 128 if kv.startswith("kvarn") else 16
    p = make(model, device, ctx, conc, kv, block)
    limit = p.request.shape.context_length
    mc, mn = p["max_context"], p["max_concurrency"]
    assert p["fits"] == (p["total_bytes"] <= p["usable_bytes"])
    if mc:
        assert make(model, device, mc, conc, kv, block)["fits"]
    if mc < limit:
        assert not make(model, device, mc + 1, conc, kv, block)["fits"]
    if mn:
        assert make(model, device, ctx, mn, kv, block)["fits"]
    assert not make(model, device, ctx, mn + 1, kv, block)["fits"]
    assert p["fits"] == (mn >= conc)


def test_moe_decode_reads_only_active_experts():
    dense = make("layers=32,hidden=4096,heads=32,kv_heads=8,ffn=14336,vocab=32000,quant=Q8_0", "H200", 1024)
    moe = make("mixtral-8x7b,quant=Q8_0", "H200", 1024)
    # Mixtral holds ~3.7x the weights of its dense twin, but a token reads the same 2 experts' worth
    # as a dense model with 2 x 14,336 MLP width: 13,549,523,200 B (test_weights.py) + KV
    assert moe["weight_bytes"] > 3.5 * dense["weight_bytes"]
    assert moe["decode_bytes_per_token"] == 13_549_523_200 + 1024 * 131_072
    # concurrent sequences route to more experts, so the shared weight read grows
    assert make("mixtral-8x7b,quant=Q8_0", "H200", 1024, 8)["decode_tok_s_ceiling_aggregate"] < \
        8 * moe["decode_tok_s_ceiling"]


def test_sliding_windows_cut_reads_not_memory():
    """hearth's pool gives every layer a slot for every token (hearth.llm sizes one block for all
    layers): a sliding-window model holds no more context than its all-global twin. A decode step
    reads less: the attention kernels start at the window's first key."""
    full = make("gemma3-27b,global_every=1", "RTX 5090", 8192)  # every layer global
    sliding = make("gemma3-27b", "RTX 5090", 8192)
    assert full["kv_bytes_per_token"] == sliding["kv_bytes_per_token"] == 62 * 8192
    assert full["kv_cache_bytes"] == sliding["kv_cache_bytes"] == 8192 * 62 * 8192
    assert (sliding["max_context"], sliding["max_concurrency"]) == (full["max_context"], full["max_concurrency"])
    # the 52 sliding layers read 1,024 of the 8,192 tokens, at 8,192 B a layer-token
    assert full["decode_bytes_per_token"] - sliding["decode_bytes_per_token"] == 52 * (8192 - 1024) * 8192
    assert "sliding ones too (hearth's pool)" in sliding.figures["kv_cache_bytes"].reason
    assert "read only their last 1,024" in sliding.figures["decode_bytes_per_token"].reason


def test_a_quantized_cache_counts_its_staging_once():
    """llama 7B, q8_0: a 16-token block of 32 layers is 16 x 32 x 2 x 32 heads x 4 x 34 B = 4,456,448;
    each sequence's f16 staging block (16 x 524,288 = 8,388,608 B) comes on top (hearth.llm). Until
    2026-12-06 each also held 2 pool blocks for it, never written (3 x (256 + 2) blocks)."""
    p = make("llama-7b,quant=F16", "A100 80GB", ctx=4096, concurrency=3, kv="q8_0")
    assert p["kv_cache_bytes"] == 3 * (256 * 4_456_448 + 8_388_608)
    assert "+ per sequence 1 f16 staging block(s) (8.0 MiB)" in p.figures["kv_cache_bytes"].reason


def test_weights_too_big():
    p = make("llama-70b,quant=F16", "RTX 4090", 4096)
    assert not p["fits"] and p["max_context"] == 0 and p["max_concurrency"] == 0
    assert "short" in p.figures["fits"].reason


def test_every_figure_has_a_one_line_reason():
    p = make("qwen3-30b-a3b", "M3 Max", 8192, 4, "kvarn_k4v4", 128)
    for key, fig in p.figures.items():
        assert fig.reason and "\n" not in fig.reason, key


@pytest.mark.parametrize("ctx,conc,message", [
    (0, 1, "--ctx must be a positive"),
    (-5, 1, "--ctx must be a positive"),
    (4097, 1, "beyond the model's context length (4096"),
    (1024, 0, "--concurrency must be at least 1"),
])
def test_impossible_numbers(ctx, conc, message):
    with pytest.raises(PlanError, match=message.replace("(", r"\(")):
        make("llama-7b", "H200", ctx, conc)


def test_memory_override_and_unknown_device():
    assert make("llama-7b", "M2 Max", 4096, memory_gib=32)["usable_bytes"] == int(0.75 * 32 * GiB)
    with pytest.raises(PlanError, match=r"unknown device 'tpu-v5'; known: this, h200, "):
        get_device("tpu-v5")
