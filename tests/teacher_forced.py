"""A golden case teacher-forced through one prefill: llama.cpp's prompt and its greedy tokens fed as one
chunk over the paged cache, the logits after the prompt's last token and after each fed token.

The llama.cpp goldens (argmax against llama.cpp's tokens) and the fidelity test's prefill path (KL from
the f32 reference) read these same rows, so each (model, case, CPU tier) is run once per session and
kept as what the two need: the same forward either way, bit for bit (measured: the two tests' LLMs,
which differ only in KV cache size, gave identical logits). The key holds what the forward's numbers
depend on: the model, the tier, the KV cache's dtype and block size. At the torch tier several cases share
one prefill (prefetch): the same torch code runs one sequence or several, and each call expands the weights."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from hearth import LLM
from hearth.bench.kld import lumped_kl_of_logits
from hearth.kernels import tiers
from hearth.kernels.attention import AttentionMetadata

STEPS = 64
"""Tokens fed after each prompt: the goldens' NEW_TOKENS and the reference's positions per case."""


def at_lower_tier() -> bool:
    """This run is at a tier below the best this CPU runs (make test's extra passes force each with
    HEARTH_CPU_TIER): the golden tests take fewer of their cases there (LOWER_TIER_CASES)."""
    return tiers.active() != tiers.choose({}, tiers.cpu_flags(), tiers.machine())[0].name


LOWER_TIER_CASES = {"smollm2-135m": 12, "qwen2.5-coder-0.5b": 6}
"""Golden cases teacher-forced at a lower tier: their first ones (the KL test's prefill rows and the goldens',
shared). With the 0.5B's free-running ones (tests/test_golden_llamacpp.py) they were ~1/2 of the tiered passes'
CPU at all 34 and 12 (2026-12-07, Zen 4: avx2 and torch 131 CPU-s each, 63 and 58 of it these). Measured then,
hearth's prefill KL over llama.cpp's on SmolLM2's first 12 cases and on all 34: avx2 0.577x and 0.580x, torch
0.328x and 0.345x."""


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


def logits_of_many(llm: LLM, seqs: list[tuple[list[int], int]]) -> list[torch.Tensor]:
    """logits_from(llm, ids, start) for each (ids, start) of `seqs`, all in one prefill, each sequence
    over its own blocks of the paged cache."""
    bs, qsl, tables, slots, positions, picks = llm.config.block_size, [0], [], [], [], []
    for ids, start in seqs:
        first = sum(map(len, tables))
        tables.append(list(range(first, first + -(-len(ids) // bs))))
        slots.append(torch.arange(len(ids)) + first * bs)
        positions.append(torch.arange(len(ids)))
        picks.append(torch.arange(qsl[-1] + start, qsl[-1] + len(ids)))
        qsl.append(qsl[-1] + len(ids))
    meta = AttentionMetadata(qsl, [len(ids) for ids, _ in seqs], tables, torch.cat(slots), bs)
    with torch.inference_mode():
        hidden = llm.model(torch.tensor([t for ids, _ in seqs for t in ids]), torch.cat(positions), meta,
                           llm.runner.kv_caches)
        logits = llm.model.compute_logits(hidden[torch.cat(picks)]).float()
    return list(logits.split([len(p) for p in picks]))


TORCH_ROWS = 1024
"""At the torch tier, golden cases share a prefill of up to this many tokens (prefetch): its linears expand
each quantized weight to bf16 on every call, which made a forward per case cost its weights' expansion
12-34 times over (the same torch code runs one sequence or several)."""


def _key(llm: LLM, name: str, i: int) -> tuple:
    return name, tiers.active(), llm.config.kv_cache_dtype, llm.config.block_size, i


def _forced(logits: torch.Tensor, case: dict, i: int, ref) -> Forced:
    """logits [STEPS, vocab] of case i -> what the goldens and the fidelity test read."""
    new = case["new_token_ids"][:STEPS]
    best = logits.argmax(-1)
    gap = logits.gather(1, best[:, None]) - logits.gather(1, torch.tensor(new)[:, None])
    kl = None if ref is None else lumped_kl_of_logits(ref["ids"][i], ref["logprobs"][i], logits.numpy())
    return Forced(best.tolist(), gap[:, 0].tolist(), kl)


def _missing(llm: LLM, name: str, i: int, ref) -> bool:
    key = _key(llm, name, i)
    return key not in _DONE or (ref is not None and _DONE[key].kl is None)


def prefetch(llm: LLM, name: str, cases: list[dict], ref=None) -> None:
    """At the torch tier, the cases teacher_forced has not run yet, several per prefill (TORCH_ROWS); at the
    others each case keeps its own prefill (the fused one-sequence path there is what the goldens test)."""
    if tiers.active() != "torch":
        return
    group: list[int] = []
    todo = [i for i in range(len(cases)) if _missing(llm, name, i, ref)]
    for n, i in enumerate(todo):
        group.append(i)
        more = todo[n + 1:n + 2]
        if not more or sum(len(cases[j]["prompt_token_ids"]) + STEPS for j in group + more) > TORCH_ROWS:
            seqs = [(cases[j]["prompt_token_ids"] + cases[j]["new_token_ids"][:STEPS][:-1],
                     len(cases[j]["prompt_token_ids"]) - 1) for j in group]
            for j, logits in zip(group, logits_of_many(llm, seqs)):  # [STEPS, vocab] each
                _DONE[_key(llm, name, j)] = _forced(logits, cases[j], j, ref)
            group = []


def teacher_forced(llm: LLM, name: str, case: dict, i: int, ref=None) -> Forced:
    """Golden case `i` (`case`, from tests/data/goldens/greedy_{name}.json) of model `name`, run on `llm`
    at this run's CPU tier; ref (the model's reference .npz) adds the KL at each position."""
    assert ref is None or ref["ids"].shape[1] == STEPS
    if _missing(llm, name, i, ref):
        prompt = case["prompt_token_ids"]
        logits = logits_from(llm, prompt + case["new_token_ids"][:STEPS][:-1], len(prompt) - 1)  # [STEPS, vocab]
        _DONE[_key(llm, name, i)] = _forced(logits, case, i, ref)
    return _DONE[_key(llm, name, i)]
