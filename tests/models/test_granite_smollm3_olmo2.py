"""granite, granitemoe, smollm3 and olmo2 beyond their logits against transformers (test_logits_vs_transformers.py):
each architecture's own feature shown to matter (without it hearth's logits are far from transformers'), the
paths each runs on the CPU backend, greedy generation through LLM, and the file's chat template."""

from __future__ import annotations

import pytest
import torch

from hearth import LLM, SamplingParams
from hearth.backends import select
from hearth.backends.cpu import NativeLayerOps, NativeMoeLayerOps
from hearth.kernels import native
from hearth.layers.linear import use_linear_policy
from hearth.layers.norm import NoNorm, RMSNorm
from hearth.loader.gguf_loader import GGUFFile
from hearth.models.registry import load_model
from tests.gguf_factory import tiny_dir
from tests.hf_built import hf_model
from tests.models.test_logits_vs_transformers import REL_TOL, REL_TOL_FAST, SEQ_LEN, PagedDriver, prompt, rel_err

ARCHS = ("granite", "granitemoe", "smollm3", "olmo2")
FAR = 0.02  # a model without the feature is this far from the reference at least (with it: REL_TOL)
# measured: granite without embedding_scale 0.29, residual_scale 0.93, attention.scale 0.12, logit_scale 3.0;
# granitemoe top-1 0.08, not renormalized 0.028; smollm3 roped everywhere 0.08; olmo2 without post norms 1.27,
# q/k norms per head 0.33; each of them with it 2e-7 .. 9e-7


def _exact(path):
    with use_linear_policy(exact=True):
        return load_model(GGUFFile(path), select())


def _logits(model, cfg, ids) -> torch.Tensor:
    return PagedDriver(model, cfg).step({"a": ids})["a"]


def _built(tmp_path, arch: str, **dims):
    """(exact model fit to SEQ_LEN, cfg, ids, transformers' logits) of a tiny `arch` file with `dims`."""
    d, name, dims = tiny_dir(tmp_path, arch, **dims)
    model, cfg = _exact(d / name)
    model.fit_context(SEQ_LEN)
    ids = prompt(cfg.vocab_size)
    return model, cfg, ids, _reference(d / name, arch, dims, ids)


def _reference(path, arch, dims, ids) -> torch.Tensor:
    with torch.no_grad():
        return hf_model(path, arch, dims)(torch.tensor([ids])).logits[0]  # [T, vocab]


def _f16_steps(model, cfg, ids) -> torch.Tensor:
    """[T, vocab]: ids[:6] as one prefill, then a decode step per token, over an f16 cache (the one the fused
    layer reads; the f32 one of the other tests runs it in parts)."""
    driver = PagedDriver(model, cfg, seed=5)
    driver.kv = [kv.half() for kv in driver.kv]
    return torch.cat([driver.step({"a": ids[:6]})["a"]] + [driver.step({"a": [t]})["a"] for t in ids[6:]])


def _stack_calls(monkeypatch) -> list[int]:
    """The layers each fused-stack decode call ran, one entry per call (FusedStack.decode patched to record)."""
    from hearth.kernels import fused_layer

    calls = []
    decode = fused_layer.FusedStack.decode
    monkeypatch.setattr(fused_layer.FusedStack, "decode", lambda *a: calls.append(decode(*a)) or calls[-1])
    return calls


def _check_chunked_equals_whole(path, arch, dims, whole_chunk: int, tol: float) -> None:
    """Through LLM: a 40-token prompt in chunks of 16 and in one chunk of `whole_chunk` give the same greedy tokens
    and logprobs, each token within 2 * tol (of the logits' range) of transformers' best."""
    ids = prompt(dims.vocab, n=40, seed=5)
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True, logprobs=1)
    runs = []
    for chunk in (16, whole_chunk):
        llm = LLM(str(path), progress=False, enable_prefix_caching=False, max_num_batched_tokens=chunk)
        runs.append(llm.generate([{"prompt_token_ids": ids}], params)[0].outputs[0])
        llm.close()
    chunked, whole = runs
    assert chunked.token_ids == whole.token_ids and len(whole.token_ids) == 12
    for a, b, t in zip(chunked.logprobs, whole.logprobs, whole.token_ids):
        assert abs(a[t] - b[t]) < 0.05
    new = list(whole.token_ids)
    ref = _reference(path, arch, dims, ids + new[:-1])[len(ids) - 1:]
    picked = ref.gather(1, torch.tensor(new).unsqueeze(1)).squeeze(1)
    assert bool((picked >= ref.amax(-1) - 2 * tol * ref.abs().max()).all())


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """arch -> (path, dims, exact model, cfg, ids, transformers' logits), each built once."""
    built = {}

    def get(arch: str):
        if arch not in built:
            d, name, dims = tiny_dir(tmp_path_factory.mktemp(arch), arch)
            model, cfg = _exact(d / name)
            ids = prompt(cfg.vocab_size)
            built[arch] = (d / name, dims, model, cfg, ids, _reference(d / name, arch, dims, ids))
        return built[arch]

    return get


@pytest.mark.parametrize("scale", ["embedding_scale", "residual_scale", "attention_scale", "logit_scale"])
def test_granite_each_scale_shows_in_the_logits(tiny, tmp_path, scale):
    """The same weights in a file without one of the four keys: hearth's logits far from transformers' with it."""
    path, dims, model, cfg, ids, ref = tiny("granite")
    assert rel_err(_logits(model, cfg, ids), ref) < REL_TOL
    d, name, _ = tiny_dir(tmp_path, "granite", **{scale: 0.0})
    assert rel_err(_logits(*_exact(d / name), ids), ref) > FAR


def test_granite_runs_the_residual_stream_rescaled(tmp_path):
    """residual_scale r as the stream / r (hearth.models.granite): embeddings x embedding_scale / r, each norm's
    eps / r^2. A file with a large eps, where the norms with the file's eps are another model (2.6e-3 off)."""
    d, name, dims = tiny_dir(tmp_path, "granite", rms_eps=1e-3)
    model, cfg = _exact(d / name)
    r = dims.residual_scale
    assert cfg.embedding_scale == pytest.approx(dims.embedding_scale / r)
    assert cfg.rms_norm_eps == pytest.approx(dims.rms_eps / r**2)
    assert (cfg.attn_scale, cfg.logit_scale) == (pytest.approx(dims.attention_scale), dims.logit_scale)
    ids = prompt(cfg.vocab_size)
    ref = _reference(d / name, "granite", dims, ids)
    assert rel_err(_logits(model, cfg, ids), ref) < REL_TOL
    for norm in (m for m in model.modules() if isinstance(m, RMSNorm)):
        norm._eps.fill_(dims.rms_eps)
    assert rel_err(_logits(model, cfg, ids), ref) > 10 * REL_TOL


def test_smollm3_every_fourth_layer_has_no_rope(tiny, monkeypatch):
    _, _, model, cfg, ids, ref = tiny("smollm3")
    assert cfg.rope_layers == (True, True, True, False) * 2
    assert [layer.attn.rope.rot_dim for layer in model.layers] == [32, 32, 32, 0] * 2
    for layer in model.layers:  # rope in the NoPE layers too: another model
        monkeypatch.setattr(layer.attn, "rope", model.layers[0].attn.rope)
    assert rel_err(_logits(model, cfg, ids), ref) > FAR


def _per_head(norm) -> RMSNorm:
    """olmo2's whole-projection q and k norms as per-head ones (qwen3's kind) with the same weights."""
    a = norm.q.weight.shape[0] // norm.heads
    return RMSNorm(torch.cat([norm.q.weight.view(-1, a), norm.k.weight.view(-1, a)]), norm.q.eps)


OLMO2_FEATURES = {  # what to take away -> per layer, (object path, attribute, value of the layer's attn)
    "post_norms": [("", "post_attn_norm", lambda a: NoNorm()), ("", "post_ffn_norm", lambda a: NoNorm())],
    "whole_qk_norm": [("attn", "qk_norm", lambda a: _per_head(a.qk_norm))],
}


@pytest.mark.parametrize("feature", list(OLMO2_FEATURES))
def test_olmo2_each_feature_shows_in_the_logits(tiny, feature):
    path, _, _, _, ids, ref = tiny("olmo2")
    model, cfg = _exact(path)  # its own: modules put back by monkeypatch come back unregistered
    for layer in model.layers:
        for where, name, value in OLMO2_FEATURES[feature]:
            setattr(getattr(layer, where) if where else layer, name, value(layer.attn))
    assert rel_err(_logits(model, cfg, ids), ref) > FAR


@pytest.mark.parametrize("routing", [{"top_k": 1}, {"renorm": False}], ids=str)
def test_granitemoe_routing_shows_in_the_logits(tiny, monkeypatch, routing):
    """Two experts a token, weighted by a softmax over their two logits (i.e. renormalized): otherwise another model."""
    _, _, model, cfg, ids, ref = tiny("granitemoe")
    assert cfg.expert_weights_norm and (cfg.num_experts, cfg.experts_used) == (4, 2)
    for layer in model.layers:
        for key, value in routing.items():
            monkeypatch.setattr(layer.mlp, key, value)
    assert rel_err(_logits(model, cfg, ids), ref) > FAR


def test_files_of_unimplemented_variants_are_refused():
    """Granite MoE with shared experts: a clear refusal, not another model."""
    from types import SimpleNamespace

    from hearth.errors import UnsupportedError
    from hearth.models.granite import GraniteMoeForCausalLM

    shared = SimpleNamespace(path="x.gguf", tensors={"blk.0.ffn_gate_shexp.weight": None})
    with pytest.raises(UnsupportedError, match="shared experts"):
        GraniteMoeForCausalLM.config_from_gguf(shared)


@pytest.mark.skipif(not native.available(), reason="native kernels do not run here")
def test_the_paths_each_runs_on_the_cpu_backend(tmp_path):
    """granite (its scales outside the layer), smollm3 (rope over 0 dims) and olmo2 (null pre-norms, whole q/k
    norms) on the fused C++ layer, each layer in one call; granitemoe's attention native in parts."""
    want = {"granite": NativeLayerOps, "smollm3": NativeLayerOps, "olmo2": NativeLayerOps,
            "granitemoe": NativeMoeLayerOps}
    for arch in ARCHS:
        d, name, _ = tiny_dir(tmp_path, arch, qtype="Q8_0")
        model, _ = load_model(GGUFFile(d / name), select())
        assert {type(layer.ops) for layer in model.layers} == {want[arch]}, arch
        if want[arch] is NativeLayerOps:
            assert all(layer.ops.fused.ptr for layer in model.layers) and model.stack is not None


@pytest.mark.skipif(not native.has("layer"), reason="no fused C++ layer at this tier")
@pytest.mark.parametrize("arch", ["granite", "smollm3", "olmo2"])
def test_the_one_call_layers_near_transformers(tmp_path, monkeypatch, arch):
    """Over an f16 cache (the one the fused layer reads; the f32 one of the other tests runs it in parts) a
    prefill and decode steps go through every layer in one C++ call (hk_stack_forward): near transformers."""
    d, name, dims = tiny_dir(tmp_path, arch, qtype="Q8_0")
    model, cfg = load_model(GGUFFile(d / name), select())
    calls = _stack_calls(monkeypatch)
    ids = prompt(cfg.vocab_size)
    ours = _f16_steps(model, cfg, ids)
    assert len(calls) == len(ids) - 5 and set(calls) == {cfg.num_layers}
    assert rel_err(ours, _reference(d / name, arch, dims, ids)) < REL_TOL_FAST


@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_generation(tmp_path, arch):
    """LLM's greedy tokens on a Q8_0 file (the fast paths), each within their error of transformers' best."""
    d, name, dims = tiny_dir(tmp_path, arch, qtype="Q8_0", context=512)
    ids = prompt(dims.vocab, n=12, seed=5)
    llm = LLM(str(d / name), progress=False)
    out = llm.generate([{"prompt_token_ids": ids}], SamplingParams(temperature=0, max_tokens=16, ignore_eos=True))
    new = list(out[0].outputs[0].token_ids)
    assert len(new) == 16
    ref = _reference(d / name, arch, dims, ids + new[:-1])[len(ids) - 1:]
    picked = ref.gather(1, torch.tensor(new).unsqueeze(1)).squeeze(1)
    assert bool((picked >= ref.amax(-1) - 2 * REL_TOL_FAST * ref.abs().max()).all())


CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.mark.parametrize("arch", ARCHS)
def test_chat_through_the_files_own_template(tmp_path, arch):
    from tests.gguf_factory import write_tiny_gguf

    path = tmp_path / f"tiny-{arch}.gguf"
    write_tiny_gguf(path, arch, qtype="Q8_0", context=512, chat_template=CHATML)
    llm = LLM(str(path), progress=False)
    assert llm.chat_template.source == CHATML
    messages = [{"role": "user", "content": "Hi"}]
    assert llm.chat_template.render(messages).endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    out = llm.chat(messages, SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))[0]
    assert len(out.outputs[0].token_ids) == 4
