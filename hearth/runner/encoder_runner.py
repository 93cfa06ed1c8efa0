"""Runs an encoder (hearth.models.encoder) over whole inputs: no KV cache, no chunks. Inputs are
sorted by length and cut into batches of at most max_num_seqs inputs and max_num_batched_tokens padded
tokens (an input longer than that is a batch alone), one forward each, then pooled and normalized (a
reranker's: scored by its classification head)."""

from __future__ import annotations

import torch

from hearth.models.encoder import pooled, scores

PAD_ID = 0  # any id: padded positions are masked out of attention and never pooled


class EncoderRunner:
    def __init__(self, model, max_num_seqs: int, max_num_batched_tokens: int):
        self.model = model
        self.max_num_seqs, self.max_num_batched_tokens = max_num_seqs, max_num_batched_tokens

    def embed(self, prompts: list[list[int]], poolings: list[str],
              pair_starts: list[int | None] | None = None) -> list[list[float]]:
        """One L2-normalized embedding per prompt, in order; poolings[i]: "mean", "cls" or "last"; or, all
        "rank" (a reranker's), [its relevance logit] each, pair_starts[i] where its second text starts (None:
        a single text)."""
        out: list[list[float] | None] = [None] * len(prompts)
        starts = pair_starts or [None] * len(prompts)
        rank = all(p == "rank" for p in poolings)  # the engine never mixes them: a reranker only ranks
        for batch in self.batches([len(p) for p in prompts]):
            lengths = torch.tensor([len(prompts[i]) for i in batch])
            ids = torch.full((len(batch), int(lengths.max())), PAD_ID, dtype=torch.long)  # [B, L]
            for b, i in enumerate(batch):
                ids[b, :len(prompts[i])] = torch.tensor(prompts[i])
            seg = torch.tensor([len(prompts[i]) if starts[i] is None else starts[i] for i in batch])  # [B]
            with torch.inference_mode():
                hidden = self.model(ids, lengths, seg)
                vectors = scores(hidden, self.model.head)[:, None] if rank else \
                    pooled(hidden, lengths, [poolings[i] for i in batch])
            for i, v in zip(batch, vectors.tolist()):
                out[i] = v
        return out

    def batches(self, lengths: list[int]) -> list[list[int]]:
        """Prompt indices in batches, shortest first: each within max_num_seqs and, padded to its longest,
        max_num_batched_tokens (at least one prompt)."""
        batches: list[list[int]] = []
        for i in sorted(range(len(lengths)), key=lengths.__getitem__):
            cur = batches[-1] if batches else None
            # sorted: i is the batch's longest, so its padded size is (len + 1) * lengths[i]
            if cur is None or len(cur) >= self.max_num_seqs or (len(cur) + 1) * lengths[i] > self.max_num_batched_tokens:
                batches.append([i])
            else:
                cur.append(i)
        return batches
