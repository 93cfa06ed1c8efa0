"""Verifying draft tokens against the target's own rows: lossless speculative sampling.

A sequence with k drafts has k + 1 rows of logits: row i scores the token after draft i - 1 (row 0
the token after the committed ones). Every row goes through exactly what plain decoding does to its
one row (bias, penalties over a history that includes the drafts before it, banned ids, grammar
mask, temperature and filters), then:
- greedy: drafts are accepted while each equals its row's first maximum; the bonus token is the
  maximum of the row after the last accepted draft. So the output is plain greedy's, token for token.
- sampled: rejection sampling (Leviathan et al. 2023, Chen et al. 2023) for a point-mass proposal
  q = delta(x), which is what a deterministic drafter (n-gram lookup) proposes: accept x with
  probability p(x); on a rejection draw from norm(max(p - q, 0)) = p without x, renormalized; after
  k acceptances the bonus is drawn from row k. Each committed token is then distributed as the
  target's. Draws come from the request's generator (seeded requests are reproducible)."""

from __future__ import annotations

import torch

from hearth.sample.sampler import apply_bias_and_penalties, target_probs
from hearth.sampling_params import SamplingParams


def race(weights: torch.Tensor, gen: torch.Generator | None) -> int:
    """A draw from weights [V] (unnormalized): the sampler's exponential race, the same noise."""
    noise = torch.empty(weights.shape[-1]).exponential_(generator=gen)
    return int((weights / noise).argmax())


def verify(logits: torch.Tensor, params: list[SamplingParams], histories: list[tuple[list[int], list[int]]],
           generators: list[torch.Generator | None], drafts: list[list[int]],
           want_logprobs: bool) -> tuple[list[list[int]], torch.Tensor | None, list[int]]:
    """logits: [R, V] f32, masked already (banned ids, grammar); R = sum(1 + len(d) for d in drafts);
    params / histories per row, generators and drafts per sequence.
    -> (per sequence its committed tokens: accepted drafts then the bonus; raw logprobs [R, V] or
    None; each sequence's first row)."""
    logprobs = logits.log_softmax(-1) if want_logprobs else None
    logits = apply_bias_and_penalties(logits, params, histories)
    best = logits.max(-1).indices.tolist()  # first maxima, as the sampler's greedy
    probs = None if all(p.greedy for p in params) else target_probs(logits, params)
    out, starts, r0 = [], [], 0
    for draft, gen in zip(drafts, generators):
        starts.append(r0)
        if params[r0].greedy:
            a = 0
            while a < len(draft) and draft[a] == best[r0 + a]:
                a += 1
            out.append(draft[:a] + [best[r0 + a]])
        else:
            out.append(_rejection_sample(probs[r0 : r0 + len(draft) + 1], draft, gen))
        r0 += len(draft) + 1
    return out, logprobs, starts


def _rejection_sample(probs: torch.Tensor, draft: list[int], gen: torch.Generator | None) -> list[int]:
    """probs: [k + 1, V], rows of one sequence; draft: its k point-mass proposals."""
    for i, x in enumerate(draft):
        u = float(torch.rand(1, generator=gen))
        if u < float(probs[i, x]):
            continue
        residual = probs[i].clone()
        residual[x] = 0.0
        return draft[:i] + [race(residual, gen)]
    return draft + [race(probs[len(draft)], gen)]
