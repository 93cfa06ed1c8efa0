"""Quantized KV ~= full-precision KV on the real models, within stated bounds:
- attention outputs on K/V/q captured from SmolLM2-135M and gemma3-270m (every layer, a 320-token
  prefill of the shipped text), relative to the same attention over the f16 cache;
- SmolLM2 perplexity at ctx 512 over 2,048 tokens, KVarN k4v2 and q4_0 vs f16;
- f16's 128 greedy tokens after a 328-token prompt, ranked first by each quantized cache.
The full-size checks (4K context over >= 16K tokens) are in
benchmarks/bench_kv_quality.py."""

from __future__ import annotations

import pytest
import torch

from hearth import LLM
from hearth.commands.eval import DEFAULT_TEXT, greedy, perplexity, runner_for
from hearth.kernels.attention import AttentionMetadata, paged_attention, write_kv_pair
from hearth.kernels.fused_layer import FusedLayer, FusedStack
from hearth.kvstore.codecs import QUANTIZED, get_codec
from hearth.kvstore.paged import QuantizedKVCache, StagingTable

CAPTURE = 320
# relative error of attention outputs, all layers and queries pooled; bounds ~1.5x what was measured
# (SmolLM2: fp8 0.041, q8_0 0.010, q4_0 0.157, k4v4 0.025, k4v2 0.080;
#  gemma3:  fp8 0.024, q8_0 0.007, q4_0 0.099, k4v4 0.020, k4v2 0.087)
ATTENTION_BOUND = {
    "smollm2-135m": {"fp8_e4m3": 0.06, "q8_0": 0.016, "q4_0": 0.23, "kvarn_k4v4": 0.04, "kvarn_k4v2": 0.12},
    "gemma3-270m": {"fp8_e4m3": 0.035, "q8_0": 0.011, "q4_0": 0.15, "kvarn_k4v4": 0.03, "kvarn_k4v2": 0.13},
}


@pytest.fixture(scope="module", params=list(ATTENTION_BOUND))
def captured(request, model_path):
    """(model name, [(q, kv [2, n, kvh, d] f16, scale, window, softcap, f16 output)] per layer)."""
    llm = LLM(str(model_path(request.param)), progress=False, num_kv_blocks=1, max_num_seqs=1)
    ids = llm.tokenizer.encode(DEFAULT_TEXT.read_text()[:4000])[:CAPTURE]
    runner = runner_for(llm, "f16", CAPTURE)
    layers = []

    backend = llm.model.backend
    attention = backend.attention

    def record(q, kv_cache, meta, scale, sliding_window=0, softcap=0.0, precise=False, sinks=None):
        out = attention(q, kv_cache, meta, scale, sliding_window, softcap, precise, sinks)
        kv = kv_cache.view(2, -1, *kv_cache.shape[-2:])[:, :CAPTURE].clone()
        layers.append((q.clone(), kv, scale, sliding_window, softcap, out))
        return out

    from hearth.runner.messages import ScheduledSequence, SchedulerOutput
    from hearth.sampling_params import SamplingParams

    seq = ScheduledSequence("c", ids, 0, list(range(-(-CAPTURE // runner.block_size))), False, SamplingParams(), [])
    patch = pytest.MonkeyPatch()
    patch.setattr(backend, "attention", record)
    patch.setattr(FusedStack, "prefill", lambda *a: 0)  # attention through Python, where record sees it
    patch.setattr(FusedLayer, "prefill", lambda *a: False)
    try:
        runner.forward(SchedulerOutput([seq]))
    finally:
        patch.undo()
    assert len(layers) == llm.model_config.num_layers
    return request.param, layers


def attend_quantized(name, q, kv, scale, window, softcap):
    codec = get_codec(name)
    bs = codec.block_size(64 if codec.tiles else None)
    n, kvh, d = kv.shape[1:]
    blocks = list(range(-(-n // bs)))
    cache, table = QuantizedKVCache(codec, len(blocks), bs, kvh, d, 2), StagingTable(bs, 2, codec.sink)
    meta = AttentionMetadata([0, n], [n], [blocks], torch.zeros(0), bs)
    meta.kv_plan = table.plan([("x", 0, n, blocks)], [0, n])
    write_kv_pair(cache, kv.float().transpose(0, 1), meta)
    return paged_attention(q, cache, meta, scale, window, softcap)


@pytest.mark.parametrize("name", list(QUANTIZED))
def test_attention_error_on_real_activations(captured, name):
    model, layers = captured
    num = den = 0.0
    for q, kv, scale, window, softcap, ref in layers:
        out = attend_quantized(name, q, kv, scale, window, softcap)
        num += float((out - ref).pow(2).sum())
        den += float(ref.pow(2).sum())
    err = (num / den) ** 0.5
    print(f"{model} {name}: attention relative error {err:.4f}")
    assert err <= ATTENTION_BOUND[model][name], f"{model} {name}: {err:.4f}"


@pytest.fixture(scope="module")
def smol(model_path):
    llm = LLM(str(model_path("smollm2-135m")), progress=False, num_kv_blocks=1, max_num_seqs=1)
    return llm, llm.tokenizer.encode(DEFAULT_TEXT.read_text(), parse_special=False)


PPL_BOUND = {"kvarn_k4v2": 0.03, "q4_0": 0.05}
"""Relative perplexity increase over f16 allowed at ctx 512 (measured +1.9% and +3.3%; f16 38.59)."""


def test_short_context_perplexity_close_to_f16(smol):
    llm, tokens = smol
    tokens = tokens[:4 * 512]
    base = perplexity(runner_for(llm, "f16", 512), llm.tokenizer, tokens, 512).value
    for name, bound in PPL_BOUND.items():
        ppl = perplexity(runner_for(llm, name, 512), llm.tokenizer, tokens, 512).value
        print(f"ppl ctx 512: f16 {base:.3f}, {name} {ppl:.3f} ({ppl / base - 1:+.2%})")
        assert ppl <= base * (1 + bound), f"{name}: {ppl:.3f} vs f16 {base:.3f}"


PROMPT, GREEDY = 328, 128
AGREE = {"fp8_e4m3": 124, "q8_0": 124, "q4_0": 120, "kvarn_k4v4": 124, "kvarn_k4v2": 122}
"""Of f16's 128 greedy tokens after a 328-token prompt, fed back one by one, how many the quantized
cache must also rank first (measured 127, 128, 127, 127, 127 at avx512). Until 2026-12-07: 256 tokens after 200,
the same 456-token context (two 64-token blocks sealed while decoding, then four) in twice the decode steps, and
these counts' double (the same share of misses; measured 255, 255, 253, 255, 254, on 2026-12-07 256, 256, 255,
255, 256). Fed back, not free-running: a near-tie (top-2 logits
within rounding of each other) then costs one position, not every token after it (free-running, this
prompt parts at token 15 whenever anything moves the rounding: bf16 prefill, the order of a rotation's
sums; benchmarks/bench_kv_quality.py reports both)."""


def test_greedy_tokens_agree_with_f16(smol):
    llm, tokens = smol
    prompt = tokens[1000:1000 + PROMPT]
    base = greedy(runner_for(llm, "f16", 512), prompt, GREEDY)
    for name, need in AGREE.items():
        runner = runner_for(llm, name, 512, block_size=64)  # KVarN: its sink, then 6 tiles
        same = sum(a == b for a, b in zip(greedy(runner, prompt, GREEDY, feed=base), base))
        print(f"greedy: {name} ranks f16's token first at {same} of {GREEDY} steps")
        assert same >= need, f"{name}: {same} of {GREEDY}"
