"""BERT-family encoders (llama.cpp's llm_build_bert graph, which `bert` and `nomic-bert` share):
embeddings (+ token type, + absolute positions unless rotary) -> LayerNorm, then per layer
bidirectional attention and an MLP, each added to its input and LayerNorm'ed after (post-norm), no
final norm. No KV cache: each batch of inputs is one forward, padded to its longest, and pooled; a
reranker's (pooling_type 4) [CLS] state goes through its classification head (classifier_head.py).

An architecture file says how its GGUF maps onto ModelConfig and which variation it runs (an
EncoderSpec); the computation lives here once."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from hearth.config import ModelConfig
from hearth.layers.rotary import Rotary
from hearth.loader.gguf_loader import GGUFFile
from hearth.models.classifier_head import ClassifierHead
from hearth.models.gguf_tensors import f32, maybe_f32
from hearth.models.transformer import base_config, require

POOLING_TYPES = {1: "mean", 2: "cls", 3: "last"}
"""llama.cpp's LLAMA_POOLING_TYPE values an encoder's embeddings take (0 none: the default)."""
RANK = 4
"""llama.cpp's LLAMA_POOLING_TYPE_RANK: a reranker (a score per query and document from its classification
head), whose pooled states are no embedding: ModelConfig.pooling "rank"."""
DEFAULT_POOLING = "mean"
"""Where the file names none: sentence-transformers' default, which most BERT embedders use."""


@dataclass(frozen=True, slots=True)
class EncoderSpec:
    """How an encoder differs from BERT's."""

    rotary: bool = False
    """NeoX rope on q and k in place of a position table (nomic-bert)."""
    gated: bool = False
    """SwiGLU MLP, silu(gate) * up, without biases (nomic-bert); else gelu(up + b) (bert)."""


class LayerNorm(nn.Module):
    def __init__(self, g: GGUFFile, name: str, eps: float):
        super().__init__()
        self.weight, self.bias, self.eps = f32(g, name + ".weight"), maybe_f32(g, name + ".bias"), eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)


def _linear(g: GGUFFile, backend, names: list[str]):
    """Weights fused along out_features, with their biases where every one has its own."""
    biases = [maybe_f32(g, n.replace(".weight", ".bias")) for n in names]
    bias = torch.cat(biases) if all(b is not None for b in biases) else None
    return backend.linear([g.tensor(n) for n in names], bias=bias)


class EncoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, spec: EncoderSpec, g: GGUFFile, i: int, backend):
        super().__init__()
        p, eps = f"blk.{i}.", cfg.rms_norm_eps
        self.heads, self.head_dim = cfg.num_heads, cfg.head_dim
        fused = p + "attn_qkv.weight" in g.tensors  # nomic-bert: one matrix, rows [q | k | v]
        self.qkv = _linear(g, backend, [p + "attn_qkv.weight"] if fused else
                           [p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"])
        self.o = _linear(g, backend, [p + "attn_output.weight"])
        self.attn_norm = LayerNorm(g, p + "attn_output_norm", eps)
        self.gated = spec.gated
        self.up = _linear(g, backend, [p + "ffn_gate.weight", p + "ffn_up.weight"] if spec.gated else
                          [p + "ffn_up.weight"])
        self.down = _linear(g, backend, [p + "ffn_down.weight"])
        self.inter = cfg.intermediate_size
        self.out_norm = LayerNorm(g, p + "layer_output_norm", eps)
        self.rope = Rotary(cfg.rope_dim or cfg.head_dim, cfg.rope_theta, neox=True) if spec.rotary else None

    def forward(self, x: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x: [B, L, hidden] f32; mask: [B, 1, 1, L] bool (True: a real token); positions: [B * L]."""
        B, L, H = x.shape
        qkv = self.qkv(x)  # [B, L, 3 * H]
        q, k, v = (qkv[..., j * H:(j + 1) * H].reshape(B * L, self.heads, self.head_dim) for j in range(3))
        if self.rope is not None:
            memo: dict = {}
            self.rope(q, positions, memo)
            self.rope(k, positions, memo)
        q, k, v = (t.view(B, L, self.heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
        # every token sees every real token of its own input: no causal mask
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0 / math.sqrt(self.head_dim))
        x = self.attn_norm(x + self.o(attn.transpose(1, 2).reshape(B, L, H)))
        return self.out_norm(x + self.down(self._act(self.up(x))))

    def _act(self, h: torch.Tensor) -> torch.Tensor:
        if self.gated:
            gate, up = h.split(self.inter, dim=-1)
            return F.silu(gate) * up
        # BERT's hidden_act "gelu" is the erf form (transformers); llama.cpp's ggml_gelu approximates it
        return F.gelu(h)


class EncoderModel(nn.Module):
    """Subclasses set `spec` and implement `config_from_gguf`."""

    spec = EncoderSpec()
    embeds_only = True
    """It has no output head: it serves embeddings, never text (hearth.engine.encoder_core)."""

    def __init__(self, cfg: ModelConfig, g: GGUFFile, backend, progress=None):
        super().__init__()
        self.cfg = cfg
        eps = cfg.rms_norm_eps
        self.embed = backend.embedding(g.tensor("token_embd.weight"))
        types = maybe_f32(g, "token_types.weight")
        self.types = None if types is None else types.reshape(-1, cfg.hidden_size)  # [type_vocab, hidden]
        self.positions = None if self.spec.rotary else backend.embedding(g.tensor("position_embd.weight"))
        self.embed_norm = LayerNorm(g, "token_embd_norm", eps)
        layers = []
        for i in range(cfg.num_layers):
            layers.append(EncoderLayer(cfg, self.spec, g, i, backend))
            if progress is not None:
                progress(i + 1, cfg.num_layers)
        self.layers = nn.ModuleList(layers)
        self.head = ClassifierHead(g, cfg.hidden_size) if cfg.pooling == "rank" else None

    @classmethod
    def config_from_gguf(cls, g: GGUFFile) -> ModelConfig:
        raise NotImplementedError

    def fit_context(self, n: int) -> None:
        """Nothing to fit: positions past the file's context are refused before they run."""

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor,
                pair_starts: torch.Tensor | None = None) -> torch.Tensor:
        """ids: [B, L] int64, each row padded past its length; lengths: [B]; pair_starts: [B], where each row's
        second text starts (token type 1 from there, BERT's segment B; L or None: type 0 throughout, as
        llama.cpp feeds every token) -> final hidden [B, L, hidden] f32 (padding rows hold values no pooling reads)."""
        B, L = ids.shape
        pos = torch.arange(L).expand(B, L)
        x = self.embed(ids)  # [B, L, hidden], a new tensor
        if self.types is not None and pair_starts is not None and len(self.types) > 1:
            x += self.types[(pos >= pair_starts[:, None]).long()]  # [B, L, hidden]
        elif self.types is not None:  # one type row (RoBERTa's), or no pair
            x += self.types[0]
        if self.positions is not None:
            x += self.positions(pos)
        x = self.embed_norm(x)
        mask = (pos < lengths[:, None])[:, None, None, :]  # [B, 1, 1, L]
        flat = pos.reshape(-1)
        for layer in self.layers:
            x = layer(x, mask, flat)
        return x


def pooled(hidden: torch.Tensor, lengths: torch.Tensor, poolings: list[str]) -> torch.Tensor:
    """hidden: [B, L, H] -> each row pooled as poolings[b] says (mean of its tokens, its first ([CLS]) or
    last) and L2-normalized: [B, H] f32."""
    rows = []
    for b, kind in enumerate(poolings):
        h = hidden[b, :int(lengths[b])]
        rows.append(POOLERS[kind](h))
    return F.normalize(torch.stack(rows).float(), dim=-1)


POOLERS = {"mean": lambda h: h.mean(0), "cls": lambda h: h[0], "last": lambda h: h[-1]}


def scores(hidden: torch.Tensor, head: ClassifierHead) -> torch.Tensor:
    """hidden: [B, L, H] -> each row's relevance logit from its [CLS] (first) state: [B] f32."""
    return head(hidden[:, 0].float())


def encoder_config(g: GGUFFile, **overrides) -> ModelConfig:
    """ModelConfig of an encoder's GGUF (rms_norm_eps holds its LayerNorm's epsilon)."""
    rank = g.arch_get("pooling_type") == RANK
    pooling = "rank" if rank else POOLING_TYPES.get(g.arch_get("pooling_type"), DEFAULT_POOLING)
    eps = float(require(g, "attention.layer_norm_epsilon"))
    return base_config(g, rms_norm_eps=eps, pooling=pooling, tie_word_embeddings=False, **overrides)
