"""Mixtral's routed experts in a llama GGUF (expert_count set, ffn_*_exps tensors): the llama file
runs them as qwen3moe's (hearth.models.moe), against transformers' MixtralForCausalLM built from the
same weights (its GGUF loader has no Mixtral mapping); its experts on the CPU backend's native path:
tests/models/test_moe.py."""

from __future__ import annotations

import pytest
import torch

from hearth.backends import select
from hearth.layers.linear import use_linear_policy
from hearth.loader.gguf_loader import GGUFFile
from hearth.models.registry import load_model
from tests.gguf_factory import write_tiny_gguf
from tests.models.test_logits_vs_transformers import REL_TOL, PagedDriver, prompt, rel_err

import transformers  # noqa: E402

DIMS = dict(experts=4, experts_used=2, expert_ffn=32)


def _unpermute(w: torch.Tensor, heads: int) -> torch.Tensor:
    """convert_hf_to_gguf's llama q/k permutation undone: rows (pair, half) -> (half, pair)."""
    return w.reshape(heads, w.shape[0] // heads // 2, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def mixtral_from(g: GGUFFile, d) -> torch.nn.Module:
    t = {name: torch.from_numpy(x.data.copy()).float() for name, x in g.tensors.items()}
    cfg = transformers.MixtralConfig(
        vocab_size=d.vocab, hidden_size=d.hidden, intermediate_size=d.expert_ffn, num_hidden_layers=d.layers,
        num_attention_heads=d.heads, num_key_value_heads=d.kv_heads, head_dim=d.head_dim, rms_norm_eps=d.rms_eps,
        rope_theta=d.rope_theta, num_local_experts=d.experts, num_experts_per_tok=d.experts_used,
        max_position_embeddings=d.context, tie_word_embeddings=False, attn_implementation="eager")
    model = transformers.MixtralForCausalLM(cfg).eval()
    state = {"model.embed_tokens.weight": t["token_embd.weight"], "model.norm.weight": t["output_norm.weight"],
             "lm_head.weight": t["output.weight"]}
    for i in range(d.layers):
        p, q = f"blk.{i}.", f"model.layers.{i}."
        state |= {q + "self_attn.q_proj.weight": _unpermute(t[p + "attn_q.weight"], d.heads),
                  q + "self_attn.k_proj.weight": _unpermute(t[p + "attn_k.weight"], d.kv_heads),
                  q + "self_attn.v_proj.weight": t[p + "attn_v.weight"],
                  q + "self_attn.o_proj.weight": t[p + "attn_output.weight"],
                  q + "input_layernorm.weight": t[p + "attn_norm.weight"],
                  q + "post_attention_layernorm.weight": t[p + "ffn_norm.weight"],
                  q + "mlp.gate.weight": t[p + "ffn_gate_inp.weight"],
                  q + "mlp.experts.gate_up_proj": torch.cat([t[p + "ffn_gate_exps.weight"], t[p + "ffn_up_exps.weight"]], 1),
                  q + "mlp.experts.down_proj": t[p + "ffn_down_exps.weight"]}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all("rotary" in k for k in missing), (missing, unexpected)
    return model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("mixtral") / "tiny-mixtral.gguf"
    d = write_tiny_gguf(path, "llama", **DIMS)
    return path, d


def test_a_llama_file_with_experts_runs_them_as_transformers_mixtral(tiny):
    path, d = tiny
    g = GGUFFile(path)
    with use_linear_policy(exact=True):
        model, cfg = load_model(g, select())
    assert cfg.num_experts == 4 and model.spec.moe
    ids = prompt(cfg.vocab_size)
    ours = PagedDriver(model, cfg).step({"a": ids})["a"]
    with torch.no_grad():
        ref = mixtral_from(g, d)(torch.tensor([ids])).logits[0]
    assert rel_err(ours, ref) < REL_TOL
    assert rel_err(ours[1:], ref[:-1]) > 0.1
