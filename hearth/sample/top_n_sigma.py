"""Top-nσ (Tang et al. 2024, llama.cpp's llama_sampler_top_n_sigma): keep the tokens whose logit is at least
max - n * σ, σ the population standard deviation of the finite logits (those no earlier filter removed).
Scaling every logit by 1 / T scales max and σ alike, so it reads the same before or after temperature: the
place llama.cpp's chain gives it (after DRY, before top-k and the others) is kept with hearth's temperature
first."""

from __future__ import annotations

import torch


def filter_top_n_sigma(logits: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """logits: [S, V]; n: [S] (<= 0: off) -> logits with the tokens below max - n * σ at -inf."""
    use = n > 0
    if not bool(use.any()):
        return logits
    finite = logits.isfinite()  # [S, V]
    count = finite.sum(-1, keepdim=True).clamp(min=1)
    vals = logits.masked_fill(~finite, 0.0)
    mean = vals.sum(-1, keepdim=True) / count
    std = ((vals - mean).square().masked_fill(~finite, 0.0).sum(-1, keepdim=True) / count).sqrt()  # [S, 1]
    # an n past float32 (inf) makes the floor -inf, or NaN where σ is 0: no token falls below it, all are kept, as
    # a huge n asks; it only masks, so it makes no NaN logit and needs no cap (llama.cpp's float does the same)
    floor = logits.amax(-1, keepdim=True) - n.unsqueeze(1) * std
    return logits.masked_fill((logits < floor) & use.unsqueeze(1), float("-inf"))
