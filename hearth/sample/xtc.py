"""XTC, "exclude top choices" (p-e-w's sampler for text-generation-webui, as llama.cpp's llama_sampler_xtc runs
it): with probability xtc_probability a row drops every token whose probability reaches xtc_threshold except
the least likely of them (nothing where fewer than two reach it); the probabilities are those of the tokens
the filters before it kept, renormalized, before temperature (llama.cpp's chain runs XTC after min-p and
temperature last).

The coin flip and the draw make one distribution, the mixture (1 - q) * p + q * renorm(p without the top
choices), and a row samples from that mixture directly (hearth.sample.sampler.target_probs): the same tokens
in law as flipping first, one draw from the request's generator (seeded requests reproduce alone or
batched), and the exact distribution speculative decoding's rejection sampling needs."""

from __future__ import annotations

import torch


def xtc_mixture(logits: torch.Tensor, temperature: torch.Tensor, probability: torch.Tensor,
                threshold: torch.Tensor) -> torch.Tensor:
    """logits: [S, V] divided by temperature [S] and filtered (-inf: removed); probability, threshold: [S]
    (probability 0: off) -> [S, V] the distribution each row samples from, XTC's mixture where it acts."""
    probs = logits.softmax(-1)
    use = probability > 0
    if not bool(use.any()):
        return probs
    p = (logits * temperature.unsqueeze(1)).softmax(-1)  # [S, V] before temperature; -inf stays -inf
    above = (p >= threshold.unsqueeze(1)) & logits.isfinite() & use.unsqueeze(1)  # [S, V]
    # the least likely of them stays (ties: the highest id, last in a stable descending order)
    least = p.masked_fill(~above, float("inf")).amin(-1, keepdim=True)
    ids = torch.arange(1, p.shape[-1] + 1).expand_as(p)
    keep = ((above & (p == least)).long() * ids).argmax(-1, keepdim=True)  # [S, 1]
    removed = above.scatter(1, keep, False) & (above.sum(-1, keepdim=True) >= 2)
    # renormalized from the logits, not the probabilities: at a low temperature what stays may underflow in p
    rest = logits.masked_fill(removed, float("-inf")).softmax(-1)
    q = probability.unsqueeze(1)
    return torch.where(removed.any(-1, keepdim=True), (1 - q) * probs + q * rest, probs)
