"""Verifying draft tokens against the target's own rows: lossless speculative sampling.

A sequence with k drafts has k + 1 rows of logits: row i scores the token after draft i - 1 (row 0
the token after the committed ones). Every row goes through exactly what plain decoding does to its
one row (bias, penalties over a history that includes the drafts before it, banned ids, grammar
mask, temperature and filters), then:
- greedy: drafts are accepted while each equals its row's first maximum; the bonus token is the
  maximum of the row after the last accepted draft. So the output is plain greedy's, token for token.
- sampled: rejection sampling (Leviathan et al. 2023, Chen et al. 2023): draft x drawn from q is
  accepted with probability min(1, p(x) / q(x)); on a rejection the token is drawn from
  norm(max(p - q, 0)); after k acceptances the bonus is drawn from row k. Each committed token is
  then distributed as the target's, whatever q is. A deterministic drafter (n-gram lookup) proposes
  a point mass q = delta(x): accept with p(x), else draw from p without x. A draft model passes its
  q rows. Draws come from the request's generator (seeded requests are reproducible)."""

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
           want_logprobs: bool, draft_probs: list[torch.Tensor | None] | None = None,
           ) -> tuple[list[list[int]], torch.Tensor | None, list[int]]:
    """logits: [R, V] f32, masked already (banned ids, grammar); R = sum(1 + len(d) for d in drafts);
    params / histories per row, generators and drafts per sequence; draft_probs: per sequence the
    [k, V] distributions its drafts were drawn from (None: point masses).
    -> (per sequence its committed tokens: accepted drafts then the bonus; raw logprobs [R, V] or
    None; each sequence's first row)."""
    logprobs = logits.log_softmax(-1) if want_logprobs else None
    logits = apply_bias_and_penalties(logits, params, histories)
    best = logits.max(-1).indices.tolist()  # first maxima, as the sampler's greedy
    probs = None if all(p.greedy for p in params) else target_probs(logits, params)
    out, starts, r0 = [], [], 0
    qs = draft_probs if draft_probs is not None else [None] * len(drafts)
    for draft, gen, q in zip(drafts, generators, qs):
        starts.append(r0)
        if params[r0].greedy:
            a = 0
            while a < len(draft) and draft[a] == best[r0 + a]:
                a += 1
            out.append(draft[:a] + [best[r0 + a]])
        else:
            out.append(_rejection_sample(probs[r0 : r0 + len(draft) + 1], draft, gen, q))
        r0 += len(draft) + 1
    return out, logprobs, starts


def _rejection_sample(probs: torch.Tensor, draft: list[int], gen: torch.Generator | None,
                      q: torch.Tensor | None = None) -> list[int]:
    """probs: [k + 1, V], rows of one sequence; draft: its k proposals, drawn from q [k, V] (None:
    point masses, q(x) = 1)."""
    for i, x in enumerate(draft):
        u = float(torch.rand(1, generator=gen))
        qx = 1.0 if q is None else float(q[i, x])
        if u * qx < float(probs[i, x]):  # u < p(x) / q(x), without dividing by a tiny q(x)
            continue
        if q is None:
            residual = probs[i].clone()
            residual[x] = 0.0
        else:
            residual = (probs[i] - q[i]).clamp_(min=0.0)
            if float(residual.sum()) <= 0.0:  # p == q: a rejection has probability 0; guard rounding
                residual = probs[i]
        return draft[:i] + [race(residual, gen)]
    return draft + [race(probs[len(draft)], gen)]
