"""A sampled row as the runner reports it (messages.SampledToken): the token, and where the request asked,
its logprob, top logprobs and raw (before the grammar's mask) logprob."""

from __future__ import annotations

import torch

from hearth.runner.messages import SampledToken
from hearth.runner.prompt_logprobs import top_logprobs


def sampled_token(params, token: int, logprobs: torch.Tensor | None, kept: float | None = None,
                  raw_known: bool = True) -> SampledToken:
    """logprobs: [V] the row's after the masks; kept: log of the mass the grammar's mask kept
    (None: the grammar removed nothing, or the request did not ask); raw_known: False where
    only what the grammar allowed was scored (no raw logprob then)."""
    if params.logprobs is None:
        return SampledToken(token)
    top = top_logprobs(logprobs[None], params.logprobs)[0]
    unmasked = float(logprobs[token]) + (kept or 0.0) if params.raw_logprobs and raw_known else None
    rank = int((logprobs > logprobs[token]).sum()) + 1  # as prompt_ranks: 1 + the tokens strictly more likely
    return SampledToken(token, float(logprobs[token]), top, unmasked, rank)
