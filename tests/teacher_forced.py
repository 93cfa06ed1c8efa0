"""A golden case teacher-forced through one prefill: llama.cpp's prompt and its greedy tokens fed as one
chunk over the paged cache, the logits after the prompt's last token and after each fed token.

The llama.cpp goldens (argmax against llama.cpp's tokens) and the fidelity test's prefill path (KL from
the f32 reference) read these same rows, so each (model, case, CPU tier) is run once per session and
kept as what the two need: the same forward either way, bit for bit (measured: the two tests' LLMs,
which differ only in KV cache size, gave identical logits). The key holds what the forward's numbers
depend on: the model, the tier, the KV cache's dtype and block size."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from hearth import LLM
from hearth.bench.kld import log_softmax, lumped_kl
from hearth.kernels import tiers
from hearth.kernels.attention import AttentionMetadata

STEPS = 64
"""Tokens fed after each prompt: the goldens' NEW_TOKENS and the reference's positions per case."""


@dataclass(frozen=True)
class Forced:
    best: list[int]
    """[STEPS] hearth's top token after each prefix."""
    gap: list[float]
    """[STEPS] hearth's logit of its top token minus that of llama.cpp's token (0 where they agree)."""
    kl: np.ndarray | None
    """[STEPS] KL from the f32 reference at these positions, when a reference was given."""


_DONE: dict[tuple[str, str, str, int, int], Forced] = {}


def logits_from(llm: LLM, ids: list[int], start: int) -> torch.Tensor:
    """[len(ids) - start, vocab]: logits after each prefix ids[:i+1], i >= start, from one prefill
    through the paged cache."""
    T, bs = len(ids), llm.config.block_size
    blocks = list(range(-(-T // bs)))
    meta = AttentionMetadata([0, T], [T], [blocks], torch.arange(T), bs)
    with torch.inference_mode():
        hidden = llm.model(torch.tensor(ids), torch.arange(T), meta, llm.runner.kv_caches)
        return llm.model.compute_logits(hidden[start:]).float()


def teacher_forced(llm: LLM, name: str, case: dict, i: int, ref=None) -> Forced:
    """Golden case `i` (`case`, from tests/data/goldens/greedy_{name}.json) of model `name`, run on `llm`
    at this run's CPU tier; ref (the model's reference .npz) adds the KL at each position."""
    assert ref is None or ref["ids"].shape[1] == STEPS
    key = (name, tiers.active(), llm.config.kv_cache_dtype, llm.config.block_size, i)
    if key not in _DONE or (ref is not None and _DONE[key].kl is None):
        prompt, new = case["prompt_token_ids"], case["new_token_ids"][:STEPS]
        logits = logits_from(llm, prompt + new[:-1], len(prompt) - 1)  # [STEPS, vocab]
        best = logits.argmax(-1)
        gap = logits.gather(1, best[:, None]) - logits.gather(1, torch.tensor(new)[:, None])
        kl = None if ref is None else lumped_kl(ref["ids"][i], ref["logprobs"][i], log_softmax(logits.numpy()))
        _DONE[key] = Forced(best.tolist(), gap[:, 0].tolist(), kl)
    return _DONE[key]
