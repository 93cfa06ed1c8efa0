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
  q rows. Draws come from the request's generator (seeded requests are reproducible).

A token tree (drafts with parents, hearth.spec_decode.tree's layout: row 1 + i scores the token
after node i) is walked from the root, one level at a time:
- greedy: take the child whose token is the row's first maximum; the path ends where none is,
  with that maximum as the bonus;
- sampled: SpecInfer's multi-draft rule for point-mass children (Miao et al. 2024): try the children
  in rank order, accepting child x with probability p'(x), where p' starts as the row's
  distribution and after each rejected child has its token zeroed (renormalized); if every child
  is rejected, the token is drawn from the last p'. Given the children, whatever chose them, the
  committed token is distributed as p: P(y) = p(y) for every y. A draft model's tree is its drafted
  chain (each chain node its parent's first child, drawn from q) plus top-k branches: at a chain
  node the first child goes first by the chain rule (accept with min(1, p(x) / q(x)), else p' =
  norm(max(p - q, 0))), then the other children as point masses on that p' -- exact as well, since
  given a rejection the token must follow p', which does not depend on x."""

from __future__ import annotations

import torch

from hearth.sample.mirostat import MirostatState
from hearth.sample.sampler import apply_bias_and_penalties, first_max, mirostat_step, target_probs
from hearth.sampling_params import SamplingParams


def race(weights: torch.Tensor, gen: torch.Generator | None) -> int:
    """A draw from weights [V] (unnormalized): the sampler's exponential race, the same noise."""
    noise = torch.empty(weights.shape[-1]).exponential_(generator=gen)
    return int((weights / noise).argmax())


def verify(logits: torch.Tensor, params: list[SamplingParams], histories: list[tuple[list[int], list[int]]],
           generators: list[torch.Generator | None], drafts: list[list[int]],
           want_logprobs: bool, draft_probs: list[torch.Tensor | None] | None = None,
           parents: list[list[int]] | None = None, mirostat: list[MirostatState | None] | None = None,
           ) -> tuple[list[list[int]], torch.Tensor | None, list[list[int]]]:
    """logits: [R, V] f32, masked already (banned ids, grammar); R = sum(1 + len(d) for d in drafts);
    params / histories per row, generators and drafts per sequence; draft_probs: per sequence the
    [k, V] distributions its drafts were drawn from (None: point masses); parents: per sequence its
    drafts' parent indices ([] or None: a chain); mirostat: per sequence its state (hearth.sample.mirostat),
    moved in place by the committed tokens (such a request drafts nothing: the scheduler's _num_drafts, so its
    one row is exact; a row after a draft would need the state the draft's distribution left).
    -> (per sequence its committed tokens: accepted drafts then the bonus; raw logprobs [R, V] or
    None; per sequence the row each committed token was decided on)."""
    logprobs = logits.log_softmax(-1) if want_logprobs else None
    logits = apply_bias_and_penalties(logits, params, histories)
    best = first_max(logits).tolist()  # first maxima, as the sampler's greedy
    row_states = None
    if mirostat is not None and any(st is not None for st in mirostat):  # each sequence's state on each of its rows
        row_states = [st for st, d in zip(mirostat, drafts) for _ in range(len(d) + 1)]
    probs = None if all(p.greedy for p in params) else target_probs(logits, params, row_states)
    out, rows, r0 = [], [], 0
    qs = draft_probs if draft_probs is not None else [None] * len(drafts)
    trees = parents if parents is not None else [None] * len(drafts)
    for draft, gen, q, par in zip(drafts, generators, qs, trees):
        if par and any(p != i - 1 for i, p in enumerate(par)):
            path, bonus = (_walk_greedy(best, r0, draft, par) if params[r0].greedy
                           else _walk_sampled(probs, r0, draft, par, gen, q))
            out.append([draft[i] for i in path] + [bonus])
            rows.append([r0] + [r0 + 1 + i for i in path])
            r0 += len(draft) + 1
            continue
        if params[r0].greedy:
            a = 0
            while a < len(draft) and draft[a] == best[r0 + a]:
                a += 1
            out.append(draft[:a] + [best[r0 + a]])
        else:
            out.append(_rejection_sample(probs[r0 : r0 + len(draft) + 1], draft, gen, q))
        rows.append(list(range(r0, r0 + len(out[-1]))))
        r0 += len(draft) + 1
    if probs is not None and row_states is not None:
        committed = [(r, t) for toks, rs in zip(out, rows) for r, t in zip(rs, toks)]
        mirostat_step(probs[[r for r, _ in committed]], [t for _, t in committed], [params[r] for r, _ in committed],
                      [row_states[r] for r, _ in committed])
    return out, logprobs, rows


def _children(parents: list[int]) -> list[list[int]]:
    """[n + 1]: [0] the root's children, [1 + i] node i's, each in rank order."""
    kids: list[list[int]] = [[] for _ in range(len(parents) + 1)]
    for i, p in enumerate(parents):
        kids[p + 1].append(i)
    return kids


def _walk_greedy(best: list[int], r0: int, draft: list[int], parents: list[int]) -> tuple[list[int], int]:
    """(the accepted path's nodes, the bonus token): at each level the child equal to the argmax."""
    kids, path, row = _children(parents), [], r0
    while True:
        b = best[row]
        nxt = next((c for c in kids[path[-1] + 1 if path else 0] if draft[c] == b), None)
        if nxt is None:
            return path, b
        path.append(nxt)
        row = r0 + 1 + nxt


def _walk_sampled(probs: torch.Tensor, r0: int, draft: list[int], parents: list[int],
                  gen: torch.Generator | None, q: torch.Tensor | None = None) -> tuple[list[int], int]:
    """SpecInfer's rule (see the module docstring); q: [chain length, V], the distributions the
    tree's chain (first children from the root) was drawn from, or None (point masses)."""
    kids, path, row = _children(parents), [], r0
    on_chain = True  # the path so far is the chain's: its first child was drawn from q[len(path)]
    while True:
        p = probs[row].clone()  # p', unnormalized: a child is accepted with p'(x) / sum(p')
        nxt = None
        children = kids[path[-1] + 1 if path else 0]
        for i, c in enumerate(children):
            x = draft[c]
            u = float(torch.rand(1, generator=gen))
            if i == 0 and on_chain and q is not None and len(path) < q.shape[0]:
                qd = q[len(path)]
                if u * float(qd[x]) < float(p[x]):  # u < p(x) / q(x)
                    nxt = c
                    break
                residual = (p - qd).clamp_(min=0.0)
                p = residual if float(residual.sum()) > 0.0 else p  # p == q: rejection has probability 0
                continue
            if u * float(p.sum()) < float(p[x]):
                nxt = c
                break
            p[x] = 0.0
        if nxt is None:
            return path, race(p, gen)
        on_chain = on_chain and nxt == children[0]
        path.append(nxt)
        row = r0 + 1 + nxt


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
