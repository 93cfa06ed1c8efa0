"""gpt-oss against transformers' GptOssForCausalLM built from the same tiny GGUF's weights (its MXFP4 experts
dequantized by gguf-py): logits over 24 positions, three times the sliding window; each feature of the
architecture shown to matter (the test fails without it); the paged cache's decode and batch paths, which
take the torch attention for the sinks; greedy generation through LLM."""

from __future__ import annotations


import numpy as np
import pytest
import torch
from gguf.quants import dequantize as gguf_dequantize

from hearth import LLM, SamplingParams
from hearth.backends import select
from hearth.layers.activation import SWIGLU_ALPHA
from hearth.layers.linear import use_linear_policy
from hearth.loader.gguf_loader import GGUFFile
from hearth.models.moe import MoE
from hearth.models.registry import load_model
from tests.gguf_gpt_oss import tiny_gpt_oss_file
from tests.models.test_logits_vs_transformers import REL_TOL, REL_TOL_FAST, SEQ_LEN, PagedDriver, prompt, rel_err

import transformers  # noqa: E402

transformers.logging.set_verbosity_error()


def _weights(g: GGUFFile) -> dict[str, torch.Tensor]:
    """Every tensor of the file as f32 in torch order, dequantized by gguf-py."""
    out = {}
    for name, t in g.tensors.items():
        out[name] = torch.from_numpy(gguf_dequantize(np.asarray(t.data), t.qtype).astype(np.float32).reshape(t.shape))
    return out


def _interleave(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """[E, n, ...] twice -> [E, 2n, ...] rows a0 b0 a1 b1 ...: transformers' gate_up layout (gate even, up odd)."""
    return torch.stack([a, b], dim=2).flatten(1, 2)


def gpt_oss_from(g: GGUFFile, d, truncate: bool = False) -> torch.nn.Module:
    """transformers' model with the file's weights (its GGUF loader does not map llama.cpp's expert names)."""
    t = _weights(g)
    rope = {"rope_type": "yarn", "rope_theta": d.rope_theta, "factor": d.context / d.yarn_original_context,
            "beta_fast": d.yarn_betas[0], "beta_slow": d.yarn_betas[1], "truncate": truncate,
            "original_max_position_embeddings": d.yarn_original_context}
    cfg = transformers.GptOssConfig(
        vocab_size=d.vocab, hidden_size=d.hidden, intermediate_size=d.expert_ffn, num_hidden_layers=d.layers,
        num_attention_heads=d.heads, num_key_value_heads=d.kv_heads, head_dim=d.head_dim, rms_norm_eps=d.rms_eps,
        sliding_window=d.sliding_window, rope_parameters=rope, num_local_experts=d.experts,
        num_experts_per_tok=d.experts_used, max_position_embeddings=d.context, tie_word_embeddings=False,
        attn_implementation="eager")
    model = transformers.GptOssForCausalLM(cfg).eval()
    state = {"model.embed_tokens.weight": t["token_embd.weight"], "model.norm.weight": t["output_norm.weight"],
             "lm_head.weight": t["output.weight"]}
    for i in range(d.layers):
        p, q = f"blk.{i}.", f"model.layers.{i}."
        for ours, theirs in (("attn_q", "q_proj"), ("attn_k", "k_proj"), ("attn_v", "v_proj"),
                             ("attn_output", "o_proj")):
            state[q + f"self_attn.{theirs}.weight"] = t[p + ours + ".weight"]
            state[q + f"self_attn.{theirs}.bias"] = t[p + ours + ".bias"]
        gate, up, down = (p + f"ffn_{w}_exps." for w in ("gate", "up", "down"))
        state |= {q + "self_attn.sinks": t[p + "attn_sinks.weight"],
                  q + "input_layernorm.weight": t[p + "attn_norm.weight"],
                  q + "post_attention_layernorm.weight": t[p + "post_attention_norm.weight"],
                  q + "mlp.router.weight": t[p + "ffn_gate_inp.weight"],
                  q + "mlp.router.bias": t[p + "ffn_gate_inp.bias"],
                  # transformers computes x @ W: [E, in, out]
                  q + "mlp.experts.gate_up_proj": _interleave(t[gate + "weight"], t[up + "weight"]).transpose(1, 2),
                  q + "mlp.experts.gate_up_proj_bias": _interleave(t[gate + "bias"], t[up + "bias"]),
                  q + "mlp.experts.down_proj": t[down + "weight"].transpose(1, 2),
                  q + "mlp.experts.down_proj_bias": t[down + "bias"]}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all("rotary" in k for k in missing), (missing, unexpected)
    return model


def reference_logits(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0]  # [T, vocab]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path, d = tiny_gpt_oss_file(tmp_path_factory.mktemp("gpt-oss"))
    g = GGUFFile(path)
    with use_linear_policy(exact=True):
        model, cfg = load_model(g, select())
    ids = prompt(cfg.vocab_size)
    return path, d, g, model, cfg, ids, reference_logits(gpt_oss_from(g, d), ids)


def test_config_from_the_file(tiny):
    _, d, _, model, cfg, *_ = tiny
    assert cfg.sliding_window_pattern == (True, False, True, False) and cfg.sliding_window == d.sliding_window
    assert (cfg.num_experts, cfg.experts_used, cfg.expert_ffn) == (d.experts, d.experts_used, d.expert_ffn)
    assert cfg.rope_yarn.factor == 4 and not cfg.rope_yarn.truncate
    assert not cfg.expert_weights_norm and not cfg.tie_word_embeddings
    assert all(layer.attn.sinks.shape == (d.heads,) for layer in model.layers)
    assert SEQ_LEN >= 3 * d.sliding_window  # the sliding layers see only part of the prompt


def test_logits_match_transformers(tiny):
    _, _, _, model, cfg, ids, ref = tiny
    ours = PagedDriver(model, cfg).step({"a": ids})["a"]
    assert ours.shape == ref.shape == (SEQ_LEN, cfg.vocab_size)
    assert rel_err(ours, ref) < REL_TOL
    assert rel_err(ours[1:], ref[:-1]) > 0.1  # the comparison has teeth


def _softmax_then_topk(self, h):
    """qwen3moe's routing: a softmax over every expert, then its top k. Renormalized it is gpt-oss's (the same
    weights); not renormalized (Mixtral files without expert_weights_norm) it is another model."""
    return MoE.route(self, h)


def _unclamped(self, gate, up):
    """gpt-oss's SwiGLU without its clamps."""
    return torch.sigmoid(gate * SWIGLU_ALPHA).mul_(gate).mul_(up + 1)


FEATURES = {  # what to take away -> (object path on a layer, attribute, value)
    "sinks": [("attn", "sinks", None)],
    "window": [("attn", "window", 0)],
    "swiglu_clamp": [("mlp.experts", "glu", _unclamped)],
    "router_bias": [("mlp", "router_bias", None)],
    "o_bias": [("attn.o", "bias", None)],
    "routing": [("mlp", "renorm", False), ("mlp", "route", _softmax_then_topk)],
}


@pytest.mark.parametrize("feature", list(FEATURES))
def test_each_feature_shows_in_the_logits(tiny, monkeypatch, feature):
    """Without any one of them hearth's logits are far from transformers'."""
    _, _, _, model, cfg, ids, ref = tiny
    for layer in model.layers:
        for where, name, value in FEATURES[feature]:
            obj = layer
            for part in where.split("."):
                obj = getattr(obj, part)
            if callable(value):
                value = value.__get__(obj)
            monkeypatch.setattr(obj, name, value)
    assert rel_err(PagedDriver(model, cfg).step({"a": ids})["a"], ref) > 0.02


def test_expert_biases_show_in_the_logits(tiny, monkeypatch):
    _, _, _, model, cfg, ids, ref = tiny
    for layer in model.layers:
        for lin in (*layer.mlp.experts.gate_up, *layer.mlp.experts.down):
            monkeypatch.setattr(lin, "bias", None)
    assert rel_err(PagedDriver(model, cfg).step({"a": ids})["a"], ref) > 0.02


def test_yarn_unrounded_as_the_reference(tiny):
    """transformers with the ramp's ends rounded (llama.cpp's YaRN) is another model: hearth follows gpt-oss's own."""
    _, d, g, model, cfg, ids, ref = tiny
    rounded = reference_logits(gpt_oss_from(g, d, truncate=True), ids)
    assert rel_err(rounded, ref) > 10 * REL_TOL


@pytest.fixture(scope="module")
def exact(tiny):
    """The f32 reference linears: the cache's and the attention's paths (decode, batched decode, chunks) alone
    make any difference (the fast linears sum a row differently by the rows in a step: row_regimes)."""
    return tiny[3], tiny[4]


def test_chunked_prefill_and_decode_equal_full_prefill(tiny, exact):
    model, cfg = exact
    ids = tiny[5]
    full = PagedDriver(model, cfg).step({"a": ids})["a"]
    driver = PagedDriver(model, cfg, seed=7)
    parts = [driver.step({"a": ids[:7]})["a"], driver.step({"a": ids[7:18]})["a"]]
    parts += [driver.step({"a": [t]})["a"] for t in ids[18:]]  # one sequence decoding: its own path
    torch.testing.assert_close(torch.cat(parts), full, rtol=0, atol=1e-5 * full.abs().max().item())


def test_batched_decodes_equal_each_alone(exact):
    """Prefill + prefill, prefill + decode, then decode + decode (the batched decode path) past the window."""
    model, cfg = exact
    a, b = prompt(cfg.vocab_size, 21, seed=2), prompt(cfg.vocab_size, 13, seed=3)
    schedule = [{"a": a[:10], "b": b[:12]}, {"a": a[10:19], "b": b[12:]}, {"a": a[19:20], "b": [a[0]]},
                {"a": a[20:], "b": [a[1]]}]
    batched = PagedDriver(model, cfg)
    together = [batched.step(s) for s in schedule]
    for seq in ("a", "b"):
        alone = PagedDriver(model, cfg, seed=3)
        single = torch.cat([alone.step({seq: s[seq]})[seq] for s in schedule])
        got = torch.cat([t[seq] for t in together])
        torch.testing.assert_close(got, single, rtol=0, atol=1e-5 * single.abs().max().item())


@pytest.mark.parametrize("kv", ["auto", "q8_0"])
def test_greedy_generation(tiny, kv):
    """LLM's greedy tokens (the fast linears: MXFP4 in place where the tier reads it, else as int4 planes; the f16
    or q8_0 cache read on the torch path for the sinks), each within the fast paths' error of transformers' best."""
    path, d, g, *_ = tiny
    ids = prompt(d.vocab, n=12, seed=5)
    llm = LLM(str(path), progress=False, kv_cache_dtype=kv)
    out = llm.generate([{"prompt_token_ids": ids}], SamplingParams(temperature=0, max_tokens=16, ignore_eos=True))
    new = list(out[0].outputs[0].token_ids)
    assert len(new) == 16
    ref = reference_logits(gpt_oss_from(g, d), ids + new[:-1])[len(ids) - 1:]
    picked = ref.gather(1, torch.tensor(new).unsqueeze(1)).squeeze(1)
    assert bool((picked >= ref.amax(-1) - 2 * REL_TOL_FAST * ref.abs().max()).all())


def test_chat_through_the_files_own_template(tmp_path):
    """A gpt-oss GGUF's Jinja template (a harmony-like one here) is the one LLM.chat renders."""
    from tests.api.test_chat_template import HARMONY_LIKE

    path, _ = tiny_gpt_oss_file(tmp_path, chat_template=HARMONY_LIKE, context=512, yarn_original_context=128)
    llm = LLM(str(path), progress=False)
    assert llm.chat_template.source == HARMONY_LIKE
    messages = [{"role": "user", "content": "Hi"}]
    assert llm.chat_template.render(messages).endswith("<|start|>user<|message|>Hi<|end|><|start|>assistant")
    out = llm.chat(messages, SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))[0]
    assert len(out.outputs[0].token_ids) == 4


def test_a_file_with_fused_gate_up_experts_is_the_same_model(tiny, tmp_path):
    """llama.cpp's converter with --fuse-gate-up-exps writes ffn_gate_up_exps (rows [gate | up], biases the
    same): the same logits as the separate tensors'."""
    import gguf

    path, _, g, model, cfg, ids, _ = tiny
    fused = tmp_path / "fused.gguf"
    w = gguf.GGUFWriter(str(fused), "gpt-oss")
    for field in gguf.GGUFReader(path).fields.values():
        if not field.name.startswith("GGUF.") and field.name != "general.architecture":
            sub = field.types[-1] if len(field.types) > 1 else None
            w.add_key_value(field.name, field.contents(), field.types[0], sub)
    for name, t in g.tensors.items():
        if "_gate_exps." in name:
            up = g.tensors[name.replace("_gate_exps.", "_up_exps.")]
            data = np.concatenate([np.asarray(t.data), np.asarray(up.data)], axis=1)  # [experts, rows, ...]
            w.add_tensor(name.replace("_gate_exps.", "_gate_up_exps."), data, raw_dtype=t.qtype)
        elif "_up_exps." not in name:
            w.add_tensor(name, np.asarray(t.data), raw_dtype=t.qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with use_linear_policy(exact=True):
        fused_model, fused_cfg = load_model(GGUFFile(fused), select())
    assert "blk.0.ffn_gate_up_exps.weight" in GGUFFile(fused).tensors and fused_cfg == cfg
    torch.testing.assert_close(PagedDriver(fused_model, fused_cfg).step({"a": ids})["a"],
                               PagedDriver(model, cfg).step({"a": ids})["a"], rtol=0, atol=0)


def test_the_engines_yarn_keeps_gpt_oss_unrounded(tiny):
    """--rope-scaling yarn over a gpt-oss file replaces the file's factor, not the architecture's rounding."""
    from hearth.config import YarnScaling
    from hearth.models.transformer import with_rope_scaling

    cfg = tiny[4]
    assert cfg.rope_yarn is not None and not cfg.rope_yarn.truncate
    assert with_rope_scaling(cfg, YarnScaling(8.0)).rope_yarn.truncate is False
