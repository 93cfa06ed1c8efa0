"""The engine's logprobs ({token id: float} per position, the server's wire shape) as vLLM's library gives them:
{token id: Logprob(logprob, rank, decoded_token)}; each output's cumulative_logprob beside."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable

from hearth.outputs import Logprob, RequestOutput


def position(logprobs: dict[int, float], rank: int | None, decode: Callable[[int], str]) -> dict[int, Logprob]:
    """One position's {chosen token: lp, then the top alternatives}: the chosen token's rank is `rank` (the
    engine's, over the whole vocabulary); an alternative's 1 + the entries strictly more likely (every token
    more likely than a top-k one is in the top k: the same rule, hearth's prompt_ranks')."""
    chosen = next(iter(logprobs), None)
    neg = sorted(-v for v in logprobs.values())  # ascending -lp: entries before -lp's first are strictly likelier
    return {t: Logprob(lp, rank if t == chosen and rank is not None else 1 + bisect_left(neg, -lp), decode(t))
            for t, lp in logprobs.items()}


def as_vllm(result: RequestOutput, ranks: dict[int, list], decode: Callable[[int], str]) -> None:
    """result's logprobs made vLLM's, in place. ranks: output index -> its tokens' ranks (EngineOutput.new_ranks)."""
    for comp in result.outputs:
        if comp.logprobs is not None:
            rs = ranks.get(comp.index) or [None] * len(comp.logprobs)
            comp.logprobs = [position(lp, r, decode) for lp, r in zip(comp.logprobs, rs)]
            comp.cumulative_logprob = sum(float(lp[t]) for lp, t in zip(comp.logprobs, comp.token_ids))
    if result.prompt_logprobs is not None:
        prompt_ranks = result.prompt_ranks or [None] * len(result.prompt_logprobs)
        result.prompt_logprobs = [None if lp is None else position(lp, r, decode)
                                  for lp, r in zip(result.prompt_logprobs, prompt_ranks)]
