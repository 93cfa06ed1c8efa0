"""OLMo 3 (an olmo2 file with attention.sliding_window) beyond its logits against transformers
(test_logits_vs_transformers.py): the window and the full layers' own rope scaling each shown to matter, the
paths it runs on the CPU backend, and the engine's chunked prefill giving what one whole prefill gives."""

from __future__ import annotations

import pytest

from hearth.backends import select
from hearth.backends.cpu import NativeLayerOps
from hearth.kernels import native
from hearth.loader.gguf_loader import GGUFFile
from hearth.models.olmo2 import swa_pattern
from hearth.models.registry import load_model
from tests.gguf_factory import tiny_dir
from tests.models.test_granite_smollm3_olmo2 import (FAR, _built, _check_chunked_equals_whole, _f16_steps, _logits,
                                                     _reference, _stack_calls)
from tests.models.test_logits_vs_transformers import REL_TOL, REL_TOL_FAST, SEQ_LEN, prompt, rel_err

YARN = {"context": 64, "yarn_original_context": 16, "yarn_betas": (4.0, 0.1), "rope_theta": 10000.0}
# measured: without the window 1.09; YaRN on the sliding layers too 0.27; each of them with it 9e-7
TOL_FAST = 2 * REL_TOL_FAST  # Q8_0 over an f16 cache: 0.019 .. 0.029 over 3 seeds (the exact linears: 6e-4): the
# bf16 rounding of the un-normed residual stream its linears read (olmo2's 3 layers: 0.014)


def test_the_pattern_llama_cpp_reads():
    """The converter's per-layer array as written; a number n, or no key: every n-th (4th) layer full."""
    assert swa_pattern([True, False, True], 3) == (True, False, True)
    assert swa_pattern(None, 8) == (True, True, True, False) * 2
    assert swa_pattern(2, 4) == (True, False, True, False)


@pytest.mark.parametrize("arch", ["olmo3", "olmo2"])
def test_the_planner_counts_the_models_sliding_layers(tmp_path, arch):
    """The converter's pattern array (olmo3), and an olmo2 file with a window but no array: llama.cpp's every 4th
    layer full, in the model and in the memory planner alike."""
    from hearth.memory.gguf_shape import shape_from_gguf
    from hearth.models.registry import model_config

    d, name, _ = tiny_dir(tmp_path, arch, layers=8, sliding_window=8)
    g = GGUFFile(d / name)
    assert (g.arch_get("attention.sliding_window_pattern") is not None) == (arch == "olmo3")
    cfg, shape = model_config(g), shape_from_gguf(g)
    assert shape.sliding == cfg.sliding_window_pattern == (True, True, True, False) * 2
    assert shape.sliding_window == cfg.sliding_window == 8


def test_the_sliding_window_shows_in_the_logits(tmp_path):
    """The 24-token prompt runs past the window of 8: with every layer full, another model."""
    model, cfg, ids, ref = _built(tmp_path, "olmo3")
    assert cfg.sliding_window_pattern == (True, True, True, False)
    assert [layer.attn.window for layer in model.layers] == [8, 8, 8, 0]
    assert rel_err(_logits(model, cfg, ids), ref) < REL_TOL
    for layer in model.layers:
        layer.attn.window = 0
    assert rel_err(_logits(model, cfg, ids), ref) > FAR


def test_yarn_on_the_full_layers_only(tmp_path):
    """A YaRN file (OLMo 3's long-context ones): the full layers scaled, the sliding ones plain (llama.cpp's olmo2
    graph, transformers' per-layer-type rope); YaRN on the sliding layers too is another model."""
    model, cfg, ids, ref = _built(tmp_path, "olmo3", **YARN)
    assert cfg.rope_yarn is not None
    assert rel_err(_logits(model, cfg, ids), ref) < REL_TOL
    full = model.layers[3].attn.rope
    for layer in model.layers:
        layer.attn.rope = full
    assert rel_err(_logits(model, cfg, ids), ref) > FAR


@pytest.mark.skipif(not native.available(), reason="native kernels do not run here")
def test_the_fused_layer_runs_it(tmp_path):
    d, name, _ = tiny_dir(tmp_path, "olmo3", qtype="Q8_0")
    model, _ = load_model(GGUFFile(d / name), select())
    assert {type(layer.ops) for layer in model.layers} == {NativeLayerOps}
    assert all(layer.ops.fused.ptr for layer in model.layers) and model.stack is not None


@pytest.mark.skipif(not native.has("layer"), reason="no fused C++ layer at this tier")
def test_the_one_call_layers_near_transformers(tmp_path, monkeypatch):
    """Over an f16 cache, a prefill and decode steps past the window, every layer in one C++ call."""
    d, name, dims = tiny_dir(tmp_path, "olmo3", qtype="Q8_0", **YARN)
    model, cfg = load_model(GGUFFile(d / name), select())
    model.fit_context(SEQ_LEN)
    calls = _stack_calls(monkeypatch)
    ids = prompt(cfg.vocab_size)
    ours = _f16_steps(model, cfg, ids)
    assert len(calls) == len(ids) - 5 and set(calls) == {cfg.num_layers}
    assert rel_err(ours, _reference(d / name, "olmo3", dims, ids)) < TOL_FAST


def test_llm_chunked_prefill_equals_whole(tmp_path):
    """Through LLM: a 40-token prompt (5 windows) in chunks of 16 and whole give the same greedy tokens and
    logprobs, each token within its error of transformers' best."""
    d, name, dims = tiny_dir(tmp_path, "olmo3", qtype="Q8_0", context=512)
    _check_chunked_equals_whole(d / name, "olmo3", dims, 512, TOL_FAST)
