"""SamplingParams.prompt_logprobs in a step: which rows score a sequence's prompt tokens, and each
token's logprob, its rank in the vocabulary and the top k from the raw logits (no penalty, temperature
or mask: what the model says of the prompt, as vLLM's prompt logprobs). Also the top-k step the
sampled tokens' logprobs share."""

from __future__ import annotations

from typing import Callable

import torch

PROMPT_LOGPROB_ROWS = 64
"""Prompt rows scored per [rows, vocab] f32 block: ~12 MB at SmolLM2's vocabulary."""


def top_logprobs(lp: torch.Tensor, k: int) -> list[dict[int, float]]:
    """lp: [R, V] logprobs -> per row its k best {token id: logprob}, best first (k = 0: empty)."""
    if not k:
        return [{} for _ in range(lp.shape[0])]
    vals, idx = lp.topk(k)
    return [dict(zip(i, v)) for i, v in zip(idx.tolist(), vals.tolist())]


def prompt_rows(seqs: list, query_start_loc: list[int]) -> dict[int, range]:
    """Sequence index -> its rows in the step whose next token is a prompt target: its chunk's first
    len(prompt_targets), for the sequences that asked."""
    return {i: range(query_start_loc[i], query_start_loc[i] + len(s.prompt_targets))
            for i, s in enumerate(seqs) if s.prompt_targets}


def with_prompt_rows(rows: list[int], *more: dict[int, range]) -> list[int]:
    """The rows the model computes hidden states for: the sampled ones and those of `more` (the prompt
    targets', an embedding's), sorted."""
    extra = {r for rows_of in more for rs in rows_of.values() for r in rs}
    return sorted({*rows, *extra}) if extra else rows


def score_prompts(hidden: torch.Tensor, out_rows: list[int], rows: list[int], targets: dict[int, range],
                  seqs: list, logits: Callable[[torch.Tensor], torch.Tensor]
                  ) -> tuple[dict[str, list[dict[int, float]]], dict[str, list[int]], torch.Tensor]:
    """hidden: [len(out_rows), hidden] -> (request id -> its prompt logprobs, request id -> their
    tokens' ranks, hidden's sampled rows [len(rows), hidden]); logits: [R, hidden] -> [R, vocab] f32."""
    if not targets and out_rows == rows:  # most steps: no row index built
        return {}, {}, hidden
    at = {r: j for j, r in enumerate(out_rows)}
    if not targets:
        return {}, {}, hidden[[at[r] for r in rows]]
    scored = {seqs[i].request_id: prompt_logprobs(hidden[[at[r] for r in rs]], seqs[i].prompt_targets,
                                                  seqs[i].params.prompt_logprobs, logits)
              for i, rs in targets.items()}
    return ({r: e for r, (e, _) in scored.items()}, {r: k for r, (_, k) in scored.items()},
            hidden[[at[r] for r in rows]])


def prompt_logprobs(hidden: torch.Tensor, targets: list[int], k: int,
                    logits: Callable[[torch.Tensor], torch.Tensor]) -> tuple[list[dict[int, float]], list[int]]:
    """hidden: [len(targets), hidden], the rows before each target -> (per target {its id: logprob,
    then the top k}, per target its rank: 1 + the tokens strictly more likely), PROMPT_LOGPROB_ROWS
    rows at a time."""
    out, ranks = [], []
    for a in range(0, len(targets), PROMPT_LOGPROB_ROWS):
        ids = targets[a:a + PROMPT_LOGPROB_ROWS]
        lp = torch.log_softmax(logits(hidden[a:a + len(ids)]), -1)  # [rows, vocab]
        own = lp[torch.arange(len(ids)), torch.tensor(ids)]  # [rows]
        # a row at a time: torch's count over the last dim of a [rows, vocab] bool tensor is ~5x slower
        # (one thread, 64 x 151936: 41 ms, against 7.6 ms by rows and 34 ms for the log-softmax and top k)
        ranks += torch.stack([(row > v).sum() for row, v in zip(lp, own)]).add_(1).tolist()
        for t, v, top in zip(ids, own.tolist(), top_logprobs(lp, k)):
            entry = {t: v}
            entry.update(top)  # the target keeps its place first (an update of a key keeps its order)
            out.append(entry)
    return out, ranks
