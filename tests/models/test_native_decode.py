"""The CPU backend's decoder layer (hearth.backends.cpu.NativeLayerOps: a few C++ calls per layer, one for
decode-sized batches) against the same model run op by op, and both against transformers; over a
quantized KV cache against the layer in parts; and for a prefill (bf16 tiles, or without AMX the
int8 GEMM) against transformers.

Both paths compute the linears with the same 8-bit-activation kernels; the fused one keeps f32 between
them (norms, rope, activation, residual adds in C++), the op-by-op one rounds to bf16 around its
linears. On these tiny random models (64-wide rows: 2 activation blocks) the 8-bit rounding dominates:
measured 0.4e-2 .. 1.3e-2 of the largest logit from transformers for the fused path, 0.3e-2 .. 1.5e-2
op by op, so both are held to REL_TOL_FAST and the fused path must not be the worse one by more than
a small margin."""

from __future__ import annotations

import pytest
import torch

from hearth.kernels import native
from hearth.loader.gguf_loader import GGUFFile
from hearth.backends import select
from hearth.backends.base import TORCH_OPS
from hearth.backends.cpu import NativeLayerOps
from hearth.models.registry import load_model
from tests.gguf_factory import tiny_dir, write_tiny_gguf
from tests.models.test_logits_vs_transformers import (REL_TOL_FAST, PagedDriver, prompt, rel_err,
                                                      transformers_logits)

pytestmark = pytest.mark.skipif(not native.available(), reason="native kernels do not run here")

FUSED_ARCHS = ["llama", "qwen2", "qwen3", "gemma3", "phi3", "granite", "smollm3", "olmo2"]
"""Run fused against op by op: between them, every ArchSpec field the fused layer declares is set
away from its default (tests/models/test_arch_spec.py checks that). gemma2's soft-caps are the fused
kernels' tanh, a little off torch's (avx2: 1.25x op by op's error): held to the torch backend instead,
tests/backends/test_backends.py."""


@pytest.mark.parametrize("arch", FUSED_ARCHS)
def test_fused_decode_equals_op_by_op_and_transformers(tmp_path, arch):
    d, name, dims = tiny_dir(tmp_path, arch, qtype="Q8_0")
    model, cfg = load_model(GGUFFile(d / name), select())
    assert all(isinstance(layer.ops, NativeLayerOps) for layer in model.layers)
    ids = prompt(cfg.vocab_size)

    def run() -> torch.Tensor:  # a 10-token prefill, then one token at a time: all decode-sized
        driver = PagedDriver(model, cfg, seed=5)
        parts = [driver.step({"a": ids[:10]})["a"]] + [driver.step({"a": [t]})["a"] for t in ids[10:]]
        return torch.cat(parts)

    fused = run()
    plans = [layer.ops for layer in model.layers]
    for layer in model.layers:
        layer.ops = TORCH_OPS  # every layer op by op in torch (same native linears)
    try:
        op_by_op = run()
    finally:
        for layer, plan in zip(model.layers, plans):
            layer.ops = plan
    ref = transformers_logits(arch, d, name, dims, ids)
    assert rel_err(fused, ref) < REL_TOL_FAST and rel_err(op_by_op, ref) < REL_TOL_FAST
    assert rel_err(fused, ref) < 1.25 * rel_err(op_by_op, ref)
    assert rel_err(fused, op_by_op) > 0  # the two paths really differ: the fused one ran


@pytest.mark.parametrize("arch", ["qwen3", "gemma3", "smollm3", "olmo2"])  # the tiny files whose head_dim the fused layer takes
def test_decode_stack_equals_the_layers_one_call_each(tmp_path, monkeypatch, arch):
    """A decode-sized step runs every layer in one C++ call (FusedStack.decode, hk_stack_forward), each
    layer as its own call does (FusedLayer): identical tokens and logprobs, one sequence or two
    batched (qwen3: q/k norms; gemma3: sliding-window layers, sandwich norms; smollm3: NoPE layers; olmo2: no pre-norms, whole q/k norms)."""
    from hearth import LLM, SamplingParams
    from hearth.kernels import fused_layer

    path = tmp_path / f"tiny-{arch}.gguf"
    write_tiny_gguf(path, arch, qtype="Q8_0", context=512)
    llm = LLM(str(path), progress=False, enable_prefix_caching=False)
    params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True, logprobs=3)
    prompts = [{"prompt_token_ids": [(7 * i + 3) % 300 + 10 for i in range(n)]} for n in (30, 9)]
    calls = []
    decode = fused_layer.FusedStack.decode
    monkeypatch.setattr(fused_layer.FusedStack, "decode", lambda *a: calls.append(decode(*a)) or calls[-1])

    def run(batch):
        return [(o.outputs[0].token_ids, [sorted(lp.items()) for lp in o.outputs[0].logprobs])
                for o in llm.generate(batch, params)]

    stacked = [run(prompts[:1]), run(prompts)]
    assert calls.count(len(llm.model.layers)) >= 2 * 39 and set(calls) == {len(llm.model.layers)}
    monkeypatch.setattr(fused_layer.FusedStack, "decode", lambda *a: 0)  # layer by layer
    assert [run(prompts[:1]), run(prompts)] == stacked


@pytest.mark.skipif(not native.has("kv_quant"), reason="the kernels here lack capability kv_quant (quantized KV readers)")
@pytest.mark.parametrize("kv", ["q8_0", "kvarn_k4v2"])
def test_fused_layer_over_a_quantized_cache_equals_the_layer_in_parts(tmp_path, monkeypatch, kv):
    """The one-call layer over a quantized cache (steps that only stage their tokens) runs the same
    kernels as the layer in parts: identical tokens and logprobs, through block seals, sink copies
    and gemma3's sliding-window layers."""
    from hearth import LLM, SamplingParams
    from hearth.kernels import fused_layer

    path = tmp_path / "tiny-gemma3.gguf"
    write_tiny_gguf(path, "gemma3", qtype="Q8_0", context=512)
    llm = LLM(str(path), kv_cache_dtype=kv, progress=False, enable_prefix_caching=False)  # both runs miss
    params = SamplingParams(temperature=0, max_tokens=150, ignore_eos=True, logprobs=3)
    prompts = [{"prompt_token_ids": [(7 * i + 3) % 300 + 10 for i in range(n)]} for n in (70, 9)]
    calls = []
    step_args = fused_layer._quantized_step_args
    monkeypatch.setattr(fused_layer, "_quantized_step_args", lambda *a: calls.append(1) or step_args(*a))

    def run():
        return [(o.outputs[0].token_ids, [sorted(lp.items()) for lp in o.outputs[0].logprobs])
                for o in llm.generate(prompts, params)]

    fused = run()
    assert len(calls) > 100 * len(llm.model.layers)  # most steps ran fused
    for layer in llm.model.layers:
        layer.ops.fused = None
    assert run() == fused


@pytest.mark.skipif(not native.bf16_tiles(), reason="no AMX bf16 tiles at this CPU tier")
@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3", "granite", "smollm3",
                                  "olmo2"])
def test_prefill_on_bf16_tiles_near_transformers(tmp_path, monkeypatch, arch):
    """A 100-token prefill runs the layers natively with their matmuls on AMX bf16 tiles (the MLP's
    act(gate) * up applied as the tiles are read out): within REL_TOL_FAST of transformers."""
    d, name, dims = tiny_dir(tmp_path, arch, qtype="Q8_0")
    model, cfg = load_model(GGUFFile(d / name), select())
    rows = []
    mlp = native.mlp_add_to
    monkeypatch.setattr(native, "mlp_add_to", lambda gu, dn, act, r, *a: rows.append(r.shape[0]) or mlp(gu, dn, act, r, *a))
    ids = prompt(cfg.vocab_size, 100)
    ours = PagedDriver(model, cfg).step({"a": ids})["a"]
    assert rows == [100] * cfg.num_layers  # every layer natively, at prefill size
    assert rel_err(ours, transformers_logits(arch, d, name, dims, ids)) < REL_TOL_FAST


@pytest.mark.skipif(not (native.vnni_gemm() or native.has("many_rows")),
                    reason="AMX tiles take prefills at this CPU tier, or no C++ prefill GEMM (torch's, neon)")
@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3", "granite", "smollm3",
                                  "olmo2"])
def test_prefill_without_amx_near_transformers(tmp_path, monkeypatch, arch):
    """Without AMX (the avx512 and avx2 tiers) a 100-token prefill runs the layers natively too, their
    matmuls on the C++ GEMMs (avx512: the int8 VNNI GEMM; avx2: its int8
    GEMM, csrc/gemm_avx2.h): within REL_TOL_FAST of transformers."""
    d, name, dims = tiny_dir(tmp_path, arch, qtype="Q8_0")
    model, cfg = load_model(GGUFFile(d / name), select())
    rows = []
    mlp = native.mlp_add_to
    monkeypatch.setattr(native, "mlp_add_to", lambda gu, dn, act, r, *a: rows.append(r.shape[0]) or mlp(gu, dn, act, r, *a))
    ids = prompt(cfg.vocab_size, 100)
    ours = PagedDriver(model, cfg).step({"a": ids})["a"]
    assert rows == [100] * cfg.num_layers  # every layer natively, at prefill size
    assert rel_err(ours, transformers_logits(arch, d, name, dims, ids)) < REL_TOL_FAST


@pytest.mark.skipif(not native.bf16_tiles(), reason="no AMX bf16 tiles at this CPU tier")
@pytest.mark.parametrize("chunk", [2048, 64], ids=["whole", "chunked"])
def test_fused_prefill_equals_the_layer_in_parts(tmp_path, monkeypatch, chunk):
    """One sequence's prefill chunk over an f16 cache runs every layer in one C++ call (FusedStack),
    each layer as in its own call (FusedLayer.prefill, attention on AMX tiles): the same kernels as
    the layer in parts, so identical tokens and logprobs all three ways. The last layer goes past
    attention only for the sampled row (keep 1), or for none in a chunk that samples nothing (keep
    0: its K/V alone, which the later chunks read)."""
    from hearth import LLM, SamplingParams
    from hearth.kernels import fused_layer

    path = tmp_path / "tiny-gemma3.gguf"
    write_tiny_gguf(path, "gemma3", qtype="Q8_0", context=512)
    llm = LLM(str(path), progress=False, enable_prefix_caching=False, max_num_batched_tokens=chunk)
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True, logprobs=3)
    prompts = [{"prompt_token_ids": [(7 * i + 3) % 300 + 10 for i in range(200)]}]
    stacked, ran, keeps = [], [], set()
    stack, prefill = fused_layer.FusedStack.prefill, fused_layer.FusedLayer.prefill

    def spy_stack(self, x, tables, kv_caches, meta, keep):
        stacked.append(stack(self, x, tables, kv_caches, meta, keep))
        keeps.add(keep)
        return stacked[-1]

    def spy(self, x, cos, sin, kv_cache, meta, keep):
        ran.append(prefill(self, x, cos, sin, kv_cache, meta, keep))
        return ran[-1]

    monkeypatch.setattr(fused_layer.FusedStack, "prefill", spy_stack)
    monkeypatch.setattr(fused_layer.FusedLayer, "prefill", spy)

    def run():
        return [(o.outputs[0].token_ids, [sorted(lp.items()) for lp in o.outputs[0].logprobs])
                for o in llm.generate(prompts, params)]

    fused = run()
    assert stacked and all(n == len(llm.model.layers) for n in stacked) and not ran  # one call per chunk
    assert keeps == ({1} if chunk > 200 else {0})  # 64-row chunks; the last 8 rows decode-sized
    monkeypatch.setattr(fused_layer.FusedStack, "prefill", lambda self, *a: 0)
    assert run() == fused
    assert ran and all(ran)  # every layer of the prefill in its own call
    monkeypatch.setattr(fused_layer.FusedLayer, "prefill", lambda self, *a: False)
    assert run() == fused
