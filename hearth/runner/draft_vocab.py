"""A reduced-vocabulary head for the draft model (speculative_config.draft_vocab; the FR-Spec idea,
Zhao et al. 2025): the draft scores only the first N token ids plus the ids of each request's own
text, and drafts from those; the vocabulary's special tokens (end of turn, EOS, tool-call tags) are
always scored, so a draft can end a turn or open a call whatever the prompt held.

Qwen's and Llama's BPE vocabularies number tokens in merge order, which follows frequency, so the
lowest ids carry most text (Qwen2.5's first 32,768 ids: ~93% of the benchmark's code tokens); a
request's rarer tokens (identifiers of the prompt, names it has written) come back as per-request
rows. The head is the draft step's biggest single matrix (Qwen2.5-0.5B: 151,936 x 896, a fifth of
the model's bytes), so a step reads far fewer bytes. The drafts stay lossless: the target verifies
every one, and a sampled request's q is the restricted, renormalized distribution it was drawn
from (the logits outside the set are -inf), which the rejection rule then uses."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import torch

from hearth.layers.quant import as_bytes, dequantize
from hearth.loader.gguf_loader import GGUFTensor


class DraftVocab:
    def __init__(self, head: GGUFTensor, size: int, backend, softcap: float | None = None,
                 keep: Iterable[int] = ()):
        """head: the draft's output matrix [vocab, hidden] as in the file; size: ids [0, size) always
        scored (0 < size <= vocab); keep: more ids always scored (the special tokens)."""
        vocab, hidden = head.shape
        if not 0 < size <= vocab:
            raise ValueError(f"draft_vocab {size} is outside 1..{vocab}")
        self.vocab, self.size, self.softcap, self.backend = vocab, size, softcap, backend
        self.base = backend.head(replace(head, shape=(size, hidden), data=head.data[:size]))  # rows [0, size)
        self._raw, self._qtype, self._hidden = as_bytes(head.data, head.qtype), head.qtype, hidden
        self.kept = sorted({i for i in keep if size <= i < vocab})
        """Ids past `size` scored for every request."""
        self._kept_rows = self._rows(self.kept).T.contiguous()  # [hidden, len(kept)] f32
        self._extra: dict[str, tuple[list[int], set[int], torch.Tensor]] = {}
        """request id -> (its ids >= size, the same as a set, their head rows f32 [M, hidden])."""

    def _rows(self, ids: list[int]) -> torch.Tensor:
        """The head's rows of ids, dequantized: [len(ids), hidden] f32."""
        if not ids:
            return torch.empty(0, self._hidden)
        return dequantize(self._raw[torch.tensor(ids)], self._qtype).view(len(ids), self._hidden).float()

    def see(self, request_id: str, tokens: list[int]) -> None:
        """Tokens of the request's text: those past the first `size` ids become rows of its head."""
        ids, seen, rows = self._extra.get(request_id) or ([], set(self.kept), torch.empty(0, self._hidden))
        new = sorted({t for t in tokens if self.size <= t < self.vocab} - seen)
        if not new:
            return
        self._extra[request_id] = (ids + new, seen | set(new), torch.cat([rows, self._rows(new)]))

    def forget(self, request_id: str) -> None:
        self._extra.pop(request_id, None)

    def logits(self, hidden: torch.Tensor, request_ids: list[str]) -> torch.Tensor:
        """hidden: [N, hidden] (row i is request_ids[i]'s) -> [N, vocab] f32, -inf outside the row's set."""
        base = self.backend.logits(self.base, hidden)  # [N, size]
        out = torch.full((hidden.shape[0], self.vocab), float("-inf"))
        out[:, : self.size] = base
        h = hidden.float().cpu()
        if self.kept:
            out[:, self.kept] = h @ self._kept_rows  # [N, len(kept)]
        for i, rid in enumerate(request_ids):
            if rid in self._extra:
                ids, _, rows = self._extra[rid]
                out[i, ids] = rows @ h[i]  # [M]
        if self.softcap:  # as the model's compute_logits (tanh(-inf) caps to -cap: put -inf back)
            keep = out.isfinite()
            out = torch.where(keep, torch.tanh(out / self.softcap) * self.softcap, out)
        return out
