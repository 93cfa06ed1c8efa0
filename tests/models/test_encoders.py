"""BERT-family encoders (`bert`, `nomic-bert`) on tiny random GGUFs: final hidden states and pooled
embeddings against transformers' BertModel (bert) and against nomic-bert's math written out below
(NomicBertModel is not in transformers: contrastors' modeling_nomic_bert.py, post-norm blocks with
rotary q/k, Wqkv, fc11 * silu(fc12) -> fc2, no biases). Each feature is shown to matter: the reference
without it is far from hearth, so the tight match is not vacuous."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from hearth.backends import select
from hearth.layers.linear import use_linear_policy
from hearth.loader.gguf_loader import GGUFFile
from hearth.models.encoder import pooled
from hearth.models.registry import load_model
from tests.bert_factory import hf_bert_layers, read_weights, write_tiny_encoder

import transformers  # noqa: E402
transformers.logging.set_verbosity_error()

REL_TOL = 1e-5  # max |hearth - reference| over the real tokens, relative to the largest |value|
REL_TOL_FAST = 2e-2  # the fast linear paths round activations (and f16 weights) to bf16
LENGTHS = (9, 23, 1, 40)
CASES = {  # case -> (arch, matrix type, dims)
    "bert": ("bert", "F32", {}),
    "bert-cls": ("bert", "F32", {"pooling_type": 2}),
    "bert-f16": ("bert", "F16", {}),
    "bert-q8_0": ("bert", "Q8_0", {}),
    "nomic-bert": ("nomic-bert", "F32", {}),
    "nomic-bert-q8_0": ("nomic-bert", "Q8_0", {}),
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(case, exact) -> (hearth model, cfg, the file's weights f32, dims); each file written once."""
    files, built = {}, {}

    def get(case: str, exact: bool = True):
        if case not in files:
            arch, qtype, dims = CASES[case]
            path = tmp_path_factory.mktemp(case) / f"{case}.gguf"
            files[case] = (path, write_tiny_encoder(path, arch, qtype=qtype, **dims))
        if (case, exact) not in built:
            path, dims = files[case]
            with use_linear_policy(exact=exact):
                model, cfg = load_model(GGUFFile(path), select())
            built[case, exact] = (model, cfg, read_weights(path), dims)
        return built[case, exact]

    return get


def batch(vocab: int, lengths=LENGTHS, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """[CLS] random tokens [SEP], padded with [PAD]: ids [B, L], lengths [B]."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    for b, n in enumerate(lengths):
        ids[b, :n] = torch.randint(104, vocab, (n,), generator=g)
        ids[b, 0], ids[b, n - 1] = 101, 102
    return ids, torch.tensor(lengths)


def bert_reference(w: dict, dims, ids, lengths, drop: str = "") -> torch.Tensor:
    """transformers' BertModel on the file's weights -> last_hidden_state [B, L, H] f64.
    drop: "types" / "positions" runs it with that embedding zeroed."""
    cfg = transformers.BertConfig(vocab_size=w["token_embd.weight"].shape[0], hidden_size=dims.hidden,
                                  num_hidden_layers=dims.layers, num_attention_heads=dims.heads,
                                  intermediate_size=dims.ffn, max_position_embeddings=dims.context,
                                  type_vocab_size=2, layer_norm_eps=dims.eps, hidden_act="gelu",
                                  attn_implementation="eager")
    m = transformers.BertModel(cfg, add_pooling_layer=False).double().eval()
    t = {k: torch.from_numpy(v).double() for k, v in w.items()}
    sd = {"embeddings.word_embeddings.weight": t["token_embd.weight"],
          "embeddings.position_embeddings.weight": t["position_embd.weight"] * (drop != "positions"),
          "embeddings.token_type_embeddings.weight": t["token_types.weight"] * (drop != "types"),
          "embeddings.LayerNorm.weight": t["token_embd_norm.weight"], "embeddings.LayerNorm.bias": t["token_embd_norm.bias"]}
    sd |= hf_bert_layers(t, dims.layers, "")
    missing, unexpected = m.load_state_dict(sd, strict=False)
    assert not unexpected and all("position_ids" in k for k in missing), (missing, unexpected)
    mask = (torch.arange(ids.shape[1]) < lengths[:, None]).long()
    with torch.no_grad():
        return m(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids)).last_hidden_state


def nomic_reference(w: dict, dims, ids, lengths, drop: str = "") -> torch.Tensor:
    """nomic-bert's forward in f64 -> [B, L, H]. drop: "types" / "rope" runs it without that."""
    t = {k: torch.from_numpy(v).double() for k, v in w.items()}
    B, L = ids.shape
    H, nh, hd = dims.hidden, dims.heads, dims.head_dim

    def ln(x, name):
        return F.layer_norm(x, (H,), t[name + ".weight"], t[name + ".bias"], dims.eps)

    def rope(x):  # x: [B, nh, L, hd]; rotate_half, as the non-interleaved rotary
        inv = 1.0 / dims.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
        ang = torch.arange(L, dtype=torch.float64)[:, None] * inv[None]
        cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
        x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    x = t["token_embd.weight"][ids] + t["token_types.weight"][0] * (drop != "types")
    x = ln(x, "token_embd_norm")
    keep = torch.arange(L)[None, :] < lengths[:, None]  # [B, L]
    for i in range(dims.layers):
        p = f"blk.{i}."
        q, k, v = (x @ t[p + "attn_qkv.weight"].T).split(H, -1)
        q, k, v = (z.view(B, L, nh, hd).transpose(1, 2) for z in (q, k, v))
        if drop != "rope":
            q, k = rope(q), rope(k)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        scores = scores.masked_fill(~keep[:, None, None, :], float("-inf"))
        attn = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, L, H)
        x = ln(x + attn @ t[p + "attn_output.weight"].T, p + "attn_output_norm")
        up, gate = x @ t[p + "ffn_up.weight"].T, x @ t[p + "ffn_gate.weight"].T  # fc11, fc12
        x = ln(x + (up * F.silu(gate)) @ t[p + "ffn_down.weight"].T, p + "layer_output_norm")
    return x


REFERENCES = {"bert": bert_reference, "nomic-bert": nomic_reference}


def rel_err(got: torch.Tensor, want: torch.Tensor, lengths) -> float:
    """max |got - want| over the real tokens, relative to the largest |want| there."""
    keep = torch.arange(want.shape[1])[None, :] < lengths[:, None]
    diff = (got.double() - want.double()).abs()[keep].max()
    return (diff / want.abs()[keep].max()).item()


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("exact", [True, False], ids=["exact", "fast"])
def test_hidden_states_match_the_reference(tiny, case, exact):
    model, cfg, w, dims = tiny(case, exact)
    ids, lengths = batch(cfg.vocab_size)
    with torch.inference_mode():
        got = model(ids, lengths)
    want = REFERENCES[cfg.arch](w, dims, ids, lengths)
    assert rel_err(got, want, lengths) < (REL_TOL if exact else REL_TOL_FAST)


@pytest.mark.parametrize("case,pooling", [("bert", "mean"), ("bert-cls", "cls"), ("nomic-bert", "mean")])
def test_pooled_embeddings_are_the_files_pooling_normalized(tiny, case, pooling):
    model, cfg, w, dims = tiny(case)
    assert cfg.pooling == pooling
    ids, lengths = batch(cfg.vocab_size)
    with torch.inference_mode():
        got = pooled(model(ids, lengths), lengths, [cfg.pooling] * len(lengths))
    h = REFERENCES[cfg.arch](w, dims, ids, lengths)
    keep = (torch.arange(ids.shape[1])[None, :] < lengths[:, None]).double()[..., None]
    ref = {"mean": (h * keep).sum(1) / lengths[:, None], "cls": h[:, 0],
           "last": h[torch.arange(len(lengths)), lengths - 1]}
    want = F.normalize(ref[pooling], dim=-1)
    torch.testing.assert_close(got.double(), want, rtol=0, atol=1e-5)
    others = [k for k in ref if k != pooling]  # another pooling would be far off: the kind is checked
    assert all((F.normalize(ref[k], dim=-1) - want).abs().max() > 1e-2 for k in others)
    assert torch.allclose(got.norm(dim=-1), torch.ones(len(lengths)), atol=1e-5)


@pytest.mark.parametrize("case,drop", [("bert", "types"), ("bert", "positions"), ("nomic-bert", "types"),
                                       ("nomic-bert", "rope")])
def test_each_feature_matters(tiny, case, drop):
    """The reference without the feature is far from hearth: a model that lost it fails the match above."""
    model, cfg, w, dims = tiny(case)
    ids, lengths = batch(cfg.vocab_size)
    with torch.inference_mode():
        got = model(ids, lengths)
    assert rel_err(got, REFERENCES[cfg.arch](w, dims, ids, lengths, drop=drop), lengths) > 100 * REL_TOL


@pytest.mark.parametrize("case", ["bert", "nomic-bert"])
def test_batched_equals_alone(tiny, case):
    """Padding never leaks: each input's hidden states in a batch are those it has alone."""
    model, cfg, *_ = tiny(case)
    ids, lengths = batch(cfg.vocab_size)
    with torch.inference_mode():
        together = model(ids, lengths)
        for b, n in enumerate(lengths.tolist()):
            alone = model(ids[b:b + 1, :n], lengths[b:b + 1])
            torch.testing.assert_close(together[b, :n], alone[0], rtol=0, atol=1e-5)


def test_a_file_without_pooling_type_pools_mean(tmp_path):
    path = tmp_path / "nopool.gguf"
    write_tiny_encoder(path, "bert", pooling_type=None)
    _, cfg = load_model(GGUFFile(path), select())
    assert cfg.pooling == "mean"


def test_lora_and_rope_scaling_on_an_encoder_are_one_line(tmp_path):
    """Both act on decoder layers: on an encoder they crashed (no attn) or ran positions past the table (a 500)."""
    from hearth import LLM
    from hearth.errors import HearthError

    path = tmp_path / "enc.gguf"
    write_tiny_encoder(path, "bert")
    with pytest.raises(HearthError, match="^--lora: bert is an embedding model; LoRA adapters apply to decoder models"):
        LLM(str(path), progress=False, lora=[(str(tmp_path / "any.gguf"), 1.0)])
    with pytest.raises(HearthError, match="^--rope-scaling: bert is an embedding model"):
        LLM(str(path), progress=False, rope_scaling={"rope_type": "linear", "factor": 4})
