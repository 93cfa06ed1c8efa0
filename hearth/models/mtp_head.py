"""Qwen3.5's multi-token-prediction head (llama.cpp's `nextn` block: src/models/qwen35.cpp graph_mtp; vLLM's
qwen3_next_mtp): the block the converter (conversion/qwen.py, _QwenMtpMixin) writes after the trunk's, at
blk.{num_layers}, `{arch}.nextn_predict_layers` of them (llama.cpp runs one).

For the token t at position p+1, given h_p (the trunk's hidden row at p, after its final norm: llama.cpp's
h_nextn, vLLM's hidden_states; for a draft after the first, the head's own output row at p):
    x = eh_proj(concat(enorm(embed(t)), hnorm(h_p)))          the embedding first (ggml_concat(e_norm, h_norm))
    x = a gated-attention decoder layer of the trunk's kind   its own K/V, at position p+1
    h_{p+1} = shared_head_norm(x); logits(t_{p+2}) = head(h_{p+1})
shared_head_norm / shared_head_head / embed_tokens fall back to the trunk's output_norm / output / token_embd
where the file has none (llama.cpp's load_block_mtp: not required). Every norm's weight is multiplied as stored:
the converter folds Qwen3.5's zero-centred +1 into each `*norm.weight`, these included.

Built on demand (mtp_head()), not with the trunk: a model that never drafts with it reads none of its weights."""

from __future__ import annotations

import torch
from torch import nn

from hearth.errors import HearthError
from hearth.layers.norm import RMSNorm
from hearth.models.gguf_tensors import f32
from hearth.models.transformer import rope_factors


class NoMtpLayer(HearthError, ValueError):
    """A speculative method that drafts with the model's MTP head, on a file that carries none."""


def mtp_layers(g) -> int:
    """How many MTP blocks follow the trunk's (`{arch}.nextn_predict_layers`; 0: none)."""
    return int(g.arch_get("nextn_predict_layers", 0) or 0)


MTP_ARCHS = ("qwen35",)
"""Architectures whose MTP block this head runs (its layer: the trunk's attention_block). qwen35moe's would be the
same with routed experts, but a MoE model does not speculate (its verify rows are not decode rows)."""


def require_mtp(g) -> None:
    """The file has an MTP block this head runs, else one line saying what to do instead."""
    if mtp_layers(g) and g.arch not in MTP_ARCHS:
        raise NoMtpLayer(f"{g.path}: drafting with {g.arch}'s MTP layer is not supported (only {', '.join(MTP_ARCHS)}'s"
                         "): use method ngram or suffix, or a draft model")
    if not mtp_layers(g):
        raise NoMtpLayer(f"{g.path}: {g.arch} has no MTP layer (no {g.arch}.nextn_predict_layers): convert it with "
                         "llama.cpp's convert_hf_to_gguf.py from a checkpoint with its mtp.* tensors (without "
                         "--no-mtp), or use method ngram or suffix, or a draft model")


class MtpHead(nn.Module):
    def __init__(self, model, g, i: int) -> None:
        # model: the trunk (Qwen35ForCausalLM), for its layer kind, embedding, final norm and head
        super().__init__()
        cfg, backend, p, eps = model.cfg, model.backend, f"blk.{i}.", model.cfg.rms_norm_eps
        self.backend = backend

        def own(name: str) -> str | None:
            return p + name if p + name in g.tensors else None

        self.embed = backend.embedding(g.tensor(own("nextn.embed_tokens.weight"))) \
            if own("nextn.embed_tokens.weight") else model.embed
        self.enorm = RMSNorm(f32(g, p + "nextn.enorm.weight"), eps)
        self.hnorm = RMSNorm(f32(g, p + "nextn.hnorm.weight"), eps)
        self.eh_proj = backend.linear(g.tensor(p + "nextn.eh_proj.weight"))  # [hidden, 2 hidden]
        self.enorm.out_dtype = self.hnorm.out_dtype = self.eh_proj.in_dtype
        self.layer = model.attention_block(cfg, g, i, backend, rope_factors(g, cfg))
        norm = own("nextn.shared_head_norm.weight") or model.final_norm
        self.norm = RMSNorm(f32(g, norm) / cfg.logit_scale, eps)
        head = own("nextn.shared_head_head.weight")
        self.lm_head = backend.head(g.tensor(head)) if head else model.lm_head

    def forward(self, ids: torch.Tensor, h: torch.Tensor, positions: torch.Tensor, meta, kv_cache) -> torch.Tensor:
        """ids [T] (t at p+1), h [T, hidden] f32 (h_p), positions [T] (p+1) -> [T, hidden] f32: h_{p+1}, normed
        (the next draft's h, and compute_logits' input)."""
        b = self.backend
        x = torch.cat([b.norm(self.enorm, self.embed(ids)), b.norm(self.hnorm, h)], dim=1)  # [T, 2 hidden]
        x = self.eh_proj(x).float()  # [T, hidden]: the residual stream the layer reads
        x = self.layer(x, positions, meta, kv_cache)
        return b.norm(self.norm, x).float()

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[N, hidden] -> [N, vocab] f32."""
        return self.backend.logits(self.lm_head, hidden)


def mtp_head(model, g) -> MtpHead:
    """The first MTP block of g (llama.cpp drafts with one), for the trunk `model` loaded from g."""
    require_mtp(g)
    return MtpHead(model, g, model.cfg.num_layers)
