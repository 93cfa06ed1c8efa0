"""SamplingParams.pooling in a step: which rows of a sequence's chunk its embedding reads, and their
sum. "mean" reads every row of every prompt chunk (the Request adds the chunks' sums up); "last" the
row that samples, the prompt's last."""

from __future__ import annotations

import torch


def pooling_rows(seqs: list, query_start_loc: list[int]) -> dict[int, range]:
    """Sequence index -> its rows in the step that its embedding reads, for the sequences that pool."""
    rows = {}
    for i, s in enumerate(seqs):
        if s.params.pooling == "mean":
            rows[i] = range(query_start_loc[i], query_start_loc[i] + len(s.token_ids))
        elif s.params.pooling == "last" and s.sample:
            rows[i] = range(query_start_loc[i + 1] - 1, query_start_loc[i + 1])
    return rows


def pooled_sums(hidden: torch.Tensor, out_rows: list[int], rows: dict[int, range], seqs: list) -> dict[str, list[float]]:
    """hidden: [len(out_rows), hidden] -> request id -> the sum of its rows' final hidden states, in f32."""
    at = {r: j for j, r in enumerate(out_rows)}
    return {seqs[i].request_id: hidden[[at[r] for r in rs]].float().sum(0).tolist() for i, rs in rows.items()}
