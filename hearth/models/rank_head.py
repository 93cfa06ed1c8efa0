"""A decoder reranker's head (Qwen3-Reranker as llama.cpp's converter writes it: `{arch}.pooling_type` 4, rank,
and `cls.output.weight`, the lm_head's "yes" and "no" rows, labels ["yes", "no"]). As llama.cpp's
build_pooling runs it for qwen3: the last token's final (normed) hidden state through cls.output, then a
softmax over the labels; llama-server's score is the first label's probability, p("yes").

hearth's scores are logits through a sigmoid (hearth.engine.pairs.activated), so the head answers the
first label's log-odds under that softmax, l_yes - l_no: sigmoid(l_yes - l_no) = softmax([l_yes, l_no])[0],
llama.cpp's score, and use_activation false gives the log-odds (vLLM's number for a Qwen3-Reranker)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from hearth.errors import UnsupportedError
from hearth.loader.gguf_loader import GGUFFile
from hearth.models.gguf_tensors import f32

WEIGHT = "cls.output.weight"
LABELS = 2
"""A relevance needs two labels (yes, no): one is a softmax of 1 for every pair, and a third's first
probability is no relevance."""


def check_rank_head(g: GGUFFile, hidden: int) -> None:
    """One line naming what is wrong where the file's head is none hearth scores (from the header alone, so
    `hearth serve` says it before loading)."""
    what = f"{g.path}: {g.arch} with pooling_type 4 (rank)"
    if WEIGHT not in g.tensors:
        raise UnsupportedError(f"{what} has no {WEIGHT} (the lm_head's label rows a decoder reranker scores with): "
                               "not a reranker hearth can score; convert it with llama.cpp's convert_hf_to_gguf.py")
    rows, cols = g.tensors[WEIGHT].shape
    labels = g.arch_get("classifier.output_labels")
    if rows != LABELS or labels is not None and len(labels) != rows:
        named = "" if labels is None else f" ({len(labels)} labels named: {list(labels)})"
        raise UnsupportedError(f"{what}: {WEIGHT} has {rows} rows{named}; hearth scores a decoder reranker "
                               f"with {LABELS} labels (yes, no), the first one's probability")
    if cols != hidden:
        raise UnsupportedError(f"{what}: {WEIGHT} reads {cols} values, not the model's {hidden}")


class RankHead(nn.Module):
    check = staticmethod(check_rank_head)
    """The model registry's check of a file's header (a class with a rank head has one)."""

    def __init__(self, g: GGUFFile, hidden: int):
        super().__init__()
        check_rank_head(g, hidden)
        self.weight = f32(g, WEIGHT)  # [2, hidden]: the "yes" row, then the "no" row

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [B, hidden] (each pair's last token, after the final norm) -> [B] f32 log-odds of the first label."""
        # the head stays where it loaded (host memory): a backend's rows come to it, one per pair
        logits = F.linear(x.to(self.weight.device, torch.float32), self.weight)  # [B, 2]
        return logits[:, 0] - logits[:, 1]
