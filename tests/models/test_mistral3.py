"""Ministral 3 (mistral3) beyond its logits against transformers (test_logits_vs_transformers.py): the attention
temperature shown to matter (positions 8 .. 23 past the tiny file's original context of 8), the paths it runs on
the CPU backend (the one-call stack within the original context, the native parts past it), and the engine's chunked prefill giving
what one whole prefill gives."""

from __future__ import annotations

import pytest
import torch

from hearth.backends import select
from hearth.backends.cpu import NativeLayerOps
from hearth.kernels import native
from hearth.layers.attn_temperature import AttnTemperature
from hearth.loader.gguf_loader import GGUFFile
from hearth.models.registry import load_model
from tests.gguf_factory import tiny_dir
from tests.models.test_granite_smollm3_olmo2 import (FAR, _built, _check_chunked_equals_whole, _f16_steps, _logits,
                                                     _reference)
from tests.models.test_logits_vs_transformers import REL_TOL, REL_TOL_FAST, SEQ_LEN, prompt, rel_err

# measured: without the temperature 0.16 from transformers, with it 4e-7; the Q8_0 native parts over an f16 cache
# 0.009 .. 0.012 over 3 seeds


def test_the_factors():
    """1 within the original context, 1 + beta ln(k + 1) in its k-th repeat (llama.cpp's and transformers' formula)."""
    t = AttnTemperature(0.1, 16384)
    got = t.factors(torch.tensor([0, 16383, 16384, 40000, 100000]), {})
    want = torch.tensor([1.0, 1.0, 1 + 0.1 * 0.6931472, 1 + 0.1 * 1.0986123, 1 + 0.1 * 1.9459101])
    torch.testing.assert_close(got, want)


def test_the_temperature_shows_in_the_logits(tmp_path):
    model, cfg, ids, ref = _built(tmp_path, "mistral3")
    assert (cfg.attn_temperature_scale, cfg.attn_temperature_floor) == (0.5, 8) and model.spec.attn_temperature
    assert rel_err(_logits(model, cfg, ids), ref) < REL_TOL
    for layer in model.layers:
        layer.attn.temperature = None
    assert rel_err(_logits(model, cfg, ids), ref) > FAR


def test_a_file_without_the_key_is_llama(tmp_path):
    """Mistral Small 3.1's text model: no temperature, the llama block on the fused C++ layer."""
    d, name, _ = tiny_dir(tmp_path, "mistral3", attn_temperature=0.0, qtype="Q8_0")
    model, cfg = load_model(GGUFFile(d / name), select())
    assert cfg.attn_temperature_scale == 0 and not model.spec.attn_temperature
    assert all(layer.attn.temperature is None for layer in model.layers)
    if native.has("layer"):
        assert all(layer.ops.fused is not None for layer in model.layers) and model.stack is not None


@pytest.mark.skipif(not native.has("layer"), reason="no fused C++ layer at this tier")
def test_the_one_call_stack_within_the_original_context_then_the_parts(tmp_path, monkeypatch):
    """Q8_0 over an f16 cache: while every position is within the original context of 8 (the factor 1) the
    layers run in one C++ call, which forms the queries itself; past it each layer's native parts, the queries
    scaled between them. A prefill and decode steps, near transformers."""
    from hearth.kernels import fused_layer

    d, name, dims = tiny_dir(tmp_path, "mistral3", qtype="Q8_0")
    model, cfg = load_model(GGUFFile(d / name), select())
    model.fit_context(SEQ_LEN)
    assert {type(layer.ops) for layer in model.layers} == {NativeLayerOps} and model.stack is not None
    lens = []
    decode = fused_layer.FusedStack.decode
    monkeypatch.setattr(fused_layer.FusedStack, "decode", lambda *a: lens.append(max(a[4].seq_lens)) or decode(*a))
    ids = prompt(cfg.vocab_size)
    ours = _f16_steps(model, cfg, ids)
    assert lens[-2:] == [7, 8] and max(lens) == 8  # the steps past 8 positions: the parts
    assert rel_err(ours, _reference(d / name, "mistral3", dims, ids)) < REL_TOL_FAST


def test_llm_chunked_prefill_equals_whole(tmp_path):
    """Through LLM: a 40-token prompt (five original contexts of 8) in chunks of 16 and whole give the same greedy
    tokens and logprobs, each token within its error of transformers' best."""
    d, name, dims = tiny_dir(tmp_path, "mistral3", qtype="Q8_0")
    _check_chunked_equals_whole(d / name, "mistral3", dims, 64, REL_TOL_FAST)
