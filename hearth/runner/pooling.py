"""SamplingParams.pooling in a step: which rows of a sequence's chunk its embedding reads, and their
sum. "mean" reads every row of every prompt chunk (the Request adds the chunks' sums up); "last" the
row that samples, the prompt's last; "rank" (a decoder reranker's) that row too, through the model's
rank head: its relevance logit, [1]."""

from __future__ import annotations

import torch


def _every_row(s, start: int, end: int) -> range | None:
    return range(start, start + len(s.token_ids))


def _sampling_row(s, start: int, end: int) -> range | None:
    return range(end - 1, end) if s.sample else None


ROWS = {"mean": _every_row, "last": _sampling_row, "rank": _sampling_row}
"""SamplingParams.pooling -> (sequence, its first row, its end) -> the rows it reads this step, or None."""


def pooling_rows(seqs: list, query_start_loc: list[int]) -> dict[int, range]:
    """Sequence index -> its rows in the step that its embedding reads, for the sequences that pool."""
    rows = {}
    for i, s in enumerate(seqs):
        pick = ROWS.get(s.params.pooling)
        if pick is not None and (r := pick(s, query_start_loc[i], query_start_loc[i + 1])) is not None:
            rows[i] = r
    return rows


def pooled_sums(hidden: torch.Tensor, out_rows: list[int], rows: dict[int, range], seqs: list,
                rank_head=None) -> dict[str, list[float]]:
    """hidden: [len(out_rows), hidden] -> request id -> the sum of its rows' final hidden states, in f32; a
    "rank" request's one row through rank_head (the model's): [its logit]."""
    if not rows:  # a step of no pooling request (most): no row index built
        return {}
    at = {r: j for j, r in enumerate(out_rows)}
    out = {}
    for i, rs in rows.items():
        v = hidden[[at[r] for r in rs]].float().sum(0)  # [hidden]
        if seqs[i].params.pooling == "rank":
            v = rank_head(v[None])  # [1]
        out[seqs[i].request_id] = v.tolist()
    return out
