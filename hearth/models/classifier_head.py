"""A reranker's classification head over its encoder's [CLS] state (a GGUF whose `{arch}.pooling_type`
is 4, llama.cpp's LLAMA_POOLING_TYPE_RANK), as llama.cpp's build_pooling runs it: `cls` (weight, bias:
BERT's pooler dense, RoBERTa's classifier.dense) then tanh, then `cls.output` (the classifier's
out_proj, BertForSequenceClassification's `classifier`). Either may be absent, as there: a file without
`cls` scores the [CLS] state itself (llama.cpp's converter drops BERT's pooler), one without
`cls.output` takes the first of `cls`'s rows (jina-reranker-v1). The score is the logit, no activation."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from hearth.errors import UnsupportedError
from hearth.loader.gguf_loader import GGUFFile
from hearth.models.gguf_tensors import f32, maybe_f32

LAYERS = ("cls", "cls.output")
"""The head's linear layers in the order they run; tanh follows the first ("cls") only."""


class ClassifierHead(nn.Module):
    def __init__(self, g: GGUFFile, hidden: int):
        super().__init__()
        if "cls.norm.weight" in g.tensors:  # ModernBERT's head norm (and its mean pooling + gelu)
            raise UnsupportedError(f"{g.path}: a reranker head with cls.norm (ModernBERT's) is not supported; "
                                   "hearth scores BERT-style heads (cls, tanh, cls.output)")
        # each: (weight [out, in] f32, bias [out] or None)
        self.dense = _layer(g, "cls")
        self.out = _layer(g, "cls.output")
        if self.dense is None and self.out is None:
            raise UnsupportedError(f"{g.path}: pooling_type 4 (rank) but no classification head (cls.weight or "
                                   "cls.output.weight): not a reranker hearth can score")
        width = hidden
        for name, layer in zip(LAYERS, (self.dense, self.out)):
            if layer is not None and layer[0].shape[1] != width:
                raise UnsupportedError(f"{g.path}: {name}.weight reads {layer[0].shape[1]} values, not {width}")
            width = width if layer is None else layer[0].shape[0]
        if self.out is not None and width != 1:
            # llama-server reads the first; a multi-label classifier's first logit is no relevance score
            raise UnsupportedError(f"{g.path}: cls.output has {width} labels; hearth reranks with a one-logit head")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [B, hidden] f32 (each input's [CLS] state) -> [B] f32 relevance logits."""
        if self.dense is not None:
            x = torch.tanh(F.linear(x, *self.dense))
        if self.out is not None:
            x = F.linear(x, *self.out)
        return x[:, 0]


def _layer(g: GGUFFile, name: str) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    if name + ".weight" not in g.tensors:
        return None
    return f32(g, name + ".weight"), maybe_f32(g, name + ".bias")
