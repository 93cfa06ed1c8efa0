"""Sampling as a pure function of (logits, per-request options, per-request generators).

Fixed order, as vLLM's v1 sampler (`v1/sample/sampler.py`, `v1/worker/gpu/sample/sampler.py`), with the
samplers llama.cpp has and vLLM lacks where llama.cpp's default chain (common_params_sampling.samplers:
penalties, dry, top_n_sigma, top_k, typical_p, top_p, min_p, xtc, temperature) puts them:
logit bias -> bad words -> repetition / frequency / presence penalties (over llama.cpp's window where
repeat_last_n is given: hearth.sample.history) -> DRY (hearth.sample.dry) -> temperature -> top-nσ -> min-p
-> top-k -> typical-p -> top-p -> XTC -> sample; a mirostat row (hearth.sample.mirostat) replaces top-nσ ...
XTC by its truncation, as llama.cpp's mirostat chain does, and its state moves with the token sampled.
Typical-p sits between top-k and top-p, as in llama.cpp's chain, and reads the distribution before
temperature, which that chain applies last; top-nσ reads the same either side of temperature (a ratio of
logit gaps), and XTC, last of the filters as there, reads its threshold before temperature too (vLLM has
none of these three). Greedy (temperature 0) is the first maximum after bias, penalties and DRY: the
filters never move it (XTC, which could, is skipped there, as every filter is).
Each filter sees what the one before left, renormalized (HF's warpers do the same, but
run min-p last; min-p commutes with top-k, not with top-p). Each row draws its noise from its own
generator, so a seeded request gives the same tokens alone or batched; XTC's coin is folded into the
distribution the row draws from (hearth.sample.xtc), so it takes no draw of its own."""

from __future__ import annotations

import itertools

import torch

from hearth.sample.bad_words import banned_last_tokens
from hearth.sample.dry import dry_penalties
from hearth.sample.history import dry_window, penalty_tokens
from hearth.sample.mirostat import MirostatState, mirostat_probs, start, update
from hearth.sample.top_n_sigma import filter_top_n_sigma
from hearth.sample.xtc import xtc_mixture
from hearth.sampling_params import GREEDY_EPS, SamplingParams


MAX_TEMPERATURE = 1e30
"""A larger temperature samples as this one does (logits / 1e30 are all ~0: uniform over the tokens left). Past
float32's 3.4e38 it was inf, and a filtered token's -inf / inf is NaN: a grammar's banned token was sampled
(llama-server's and Ollama's routes keep an unbounded temperature)."""
REPETITION_PENALTY_RANGE = (1e-30, 1e30)
"""repetition_penalty as applied, clamped: past float32's range 1e39 was inf and 1e-50 zero, and a zero logit
* inf (a positive one / 0: inf, then softmax) was NaN, which greedy picks first. Clamped, not refused: vLLM and
llama.cpp take any positive value, and past these bounds a repeated token's logit is already ~0 or far below
every other (the bound's behaviour), with float32 room left for temperature's division."""


def _pairs(rows: list[int], token_lists: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """(row index, token id) of every token in token_lists[j], which belongs to row rows[j]."""
    lengths = torch.tensor([len(t) for t in token_lists])
    cols = torch.tensor(list(itertools.chain.from_iterable(token_lists)), dtype=torch.long)
    return torch.repeat_interleave(torch.tensor(rows), lengths), cols


def apply_bias_and_penalties(logits: torch.Tensor, params: list[SamplingParams],
                             histories: list[tuple[list[int], list[int]]]) -> torch.Tensor:
    """logits: [S, V], modified in place; histories[i] = (prompt ids, output ids: at least the tail its bad
    words read, all of them where a penalty reads them).
    Rows without options are untouched; one batched op per option, not one per row."""
    allowed = [i for i, p in enumerate(params) if p.allowed_token_ids]
    if allowed:  # vLLM's allowed_token_ids: every other token -inf, first (a bias cannot lift it back)
        r, c = _pairs(allowed, [params[i].allowed_token_ids for i in allowed])
        kept = logits[r, c]
        logits[torch.tensor(allowed)] = float("-inf")
        logits[r, c] = kept
    bias = [(i, t, b) for i, p in enumerate(params) if p.logit_bias for t, b in p.logit_bias.items()]
    if bias:
        r, t, b = zip(*bias)
        logits.index_put_((torch.tensor(r), torch.tensor(t)), torch.tensor(b, dtype=logits.dtype),
                          accumulate=True)
    # bad words: a verify row's history holds the drafts before it, so a banned draft is rejected there
    bad = [(i, t) for i, p in enumerate(params) if p.bad_words_token_ids
           for t in banned_last_tokens(p.bad_words_token_ids, histories[i][1])]
    if bad:
        r, t = zip(*bad)
        logits[torch.tensor(r), torch.tensor(t)] = float("-inf")
    # (repetition's tokens, presence / frequency's): vLLM's rule, or llama.cpp's window (repeat_last_n)
    reads = [penalty_tokens(p, *histories[i]) if p.penalized else ([], []) for i, p in enumerate(params)]
    rep = [i for i, p in enumerate(params) if p.repetition_penalty != 1.0 and reads[i][0]]
    if rep:
        # HF/vLLM rule over prompt and output: divide positive logits, multiply the others.
        # A repeated id gathers the same old value, so writing it twice writes the same new one.
        r, c = _pairs(rep, [reads[i][0] for i in rep])
        lo, hi = REPETITION_PENALTY_RANGE
        pen = torch.tensor([min(max(p.repetition_penalty, lo), hi) for p in params], dtype=logits.dtype)[r]
        vals = logits[r, c]
        logits[r, c] = torch.where(vals > 0, vals / pen, vals * pen)
    pf = [i for i, p in enumerate(params) if (p.presence_penalty or p.frequency_penalty) and reads[i][1]]
    if pf:
        # OpenAI rule, over output tokens only: logit -= frequency * count + presence * (count > 0)
        r, c = _pairs(pf, [reads[i][1] for i in pf])
        V = logits.shape[-1]
        flat, counts = torch.unique(r * V + c, return_counts=True)
        r, c = flat // V, flat % V
        freq = torch.tensor([p.frequency_penalty for p in params], dtype=logits.dtype)[r]
        pres = torch.tensor([p.presence_penalty for p in params], dtype=logits.dtype)[r]
        logits[r, c] -= freq * counts.to(logits.dtype) + pres
    dry = [(i, t, d) for i, p in enumerate(params) if p.dry
           for t, d in dry_penalties(dry_window(p, *histories[i]), p.dry_breaker_ids or {}, p.dry_multiplier,
                                     p.dry_base, p.dry_allowed_length).items()]
    if dry:
        r, t, d = zip(*dry)  # one (row, token) each: a plain subtraction
        logits[torch.tensor(r), torch.tensor(t)] -= torch.tensor(d, dtype=logits.dtype)
    return logits


def filter_top_k_top_p_min_p(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                             min_p: torch.Tensor, typical_p: torch.Tensor | None = None,
                             temperature: torch.Tensor | None = None) -> torch.Tensor:
    """logits: [S, V] already divided by temperature; top_k [S] (0 = off), top_p [S], min_p [S],
    typical_p [S] (1 = off; None: all off), temperature [S] what logits were divided by (None: 1).
    Filtered-out tokens become -inf. Order and tie rules follow vLLM's apply_min_p and
    apply_top_k_top_p: min-p, then top-k keeping every token tied with the k-th, then (llama.cpp's place
    for it) typical-p, then top-p."""
    V = logits.shape[-1]
    if bool((min_p > 0).any()):
        # keep p >= min_p * p_max: a ratio, so the same before or after renormalizing
        probs = logits.softmax(-1)
        threshold = probs.max(-1, keepdim=True).values * min_p.unsqueeze(1)
        logits = logits.masked_fill(probs < threshold, float("-inf"))
    use_k = (top_k > 0) & (top_k < V)
    use_p = top_p < 1
    use_typical = typical_p is not None and bool((typical_p < 1).any())
    if bool(use_k.any()) and (use_typical or not bool(use_p.any())):  # top-k alone: the k largest, no full sort
        k = torch.where(use_k, top_k, 1)
        kth = logits.topk(int(k.max()), dim=-1).values.gather(1, (k - 1).unsqueeze(1))
        kth = kth.masked_fill(~use_k.unsqueeze(1), float("-inf"))
        logits = logits.masked_fill(logits < kth, float("-inf"))
        use_k = torch.zeros_like(use_k)
    if use_typical:
        logits = filter_typical_p(logits, typical_p, temperature)
    if not bool(use_p.any()):
        return logits
    # stable: tied tokens stay in id order, so top-p's prefix takes the lower ids first
    sorted_logits, order = logits.sort(dim=-1, descending=True, stable=True)
    if bool(use_k.any()):
        k = torch.where(use_k, top_k, V)
        kth = sorted_logits.gather(1, (k - 1).unsqueeze(1))
        sorted_logits = sorted_logits.masked_fill(sorted_logits < kth, float("-inf"))
    probs = sorted_logits.softmax(-1)  # renormalized over what min-p and top-k left
    # keep the smallest prefix whose mass reaches top_p: drop a token once the mass before it
    # (an exclusive cumsum, not cumsum - p, which cancels) reaches top_p; the first is always kept
    # (top_p 0: it alone, llama.cpp's min_keep 1; the lowest id of tied maxima, as the stable sort puts it).
    # Rows at top_p = 1 drop nothing, even where a float32 cumsum reaches 1.0 before the tail.
    before = torch.cat([torch.zeros_like(probs[:, :1]), probs[:, :-1].cumsum(-1)], dim=-1)
    drop = (before >= top_p.unsqueeze(1)) & use_p.unsqueeze(1)
    drop[:, 0] = False
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.empty_like(logits).scatter_(-1, order, sorted_logits)


def filter_typical_p(logits: torch.Tensor, typical_p: torch.Tensor,
                     temperature: torch.Tensor | None = None) -> torch.Tensor:
    """logits: [S, V] divided by temperature [S] (None: 1); typical_p: [S] (1 = off) -> logits with the
    atypical tokens at -inf. Locally typical sampling (Meister et al. 2022) as llama.cpp's
    llama_sampler_typical: over the renormalized distribution left so far, before temperature (llama.cpp's
    default chain applies temperature last: at T = 0.5, typical_p 0.5 on [1/2, 1/4, 1/8, 1/8] it keeps the
    first two, not the first alone), rank tokens by |-log p - H| (H its entropy), ascending (ties in id
    order), and keep them until the mass kept exceeds typical_p, the crossing token included (llama.cpp's
    `cum_sum > p`: drop a token once the mass before it exceeds typical_p)."""
    use = typical_p < 1
    untempered = logits if temperature is None else logits * temperature.unsqueeze(1)  # -inf stays -inf
    logp = untempered.log_softmax(-1)  # -inf where filtered out: p 0, last in the ranking
    p = logp.exp()
    entropy = -torch.where(p > 0, p * logp, torch.zeros_like(p)).sum(-1, keepdim=True)  # [S, 1]
    order = (-logp - entropy).abs().argsort(dim=-1, stable=True)
    ranked = p.gather(1, order)
    before = torch.cat([torch.zeros_like(ranked[:, :1]), ranked[:, :-1].cumsum(-1)], dim=-1)
    drop = (before > typical_p.unsqueeze(1)) & use.unsqueeze(1)
    return logits.masked_fill(torch.zeros_like(drop).scatter_(-1, order, drop), float("-inf"))


def first_max(logits: torch.Tensor) -> torch.Tensor:
    """[S, V] -> [S] int64: each row's first maximum, exactly logits.max(-1).indices (a NaN counts as
    the maximum, its first one, as torch's). On the CPU numpy's argmax, a vector loop with the same rules
    (first maximum, first NaN): torch's max with indices is a scalar loop (Zen 4: 44 us at 1 x 49,152,
    660 at 16 x 49,152; numpy's 4 and 51)."""
    if logits.device.type != "cpu" or logits.dtype != torch.float32:
        return logits.max(-1).indices
    return torch.from_numpy(logits.numpy().argmax(-1))


def sample(logits: torch.Tensor, params: list[SamplingParams],
           generators: list[torch.Generator | None],
           histories: list[tuple[list[int], list[int]]],
           mirostat: list[MirostatState | None] | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """logits: [S, V] f32 (modified in place) -> (token ids [S], logprobs [S, V] of the raw logits,
    or None when no request asked for logprobs: a full-vocab log_softmax is ~0.2 ms at 262k).

    Logprobs are vLLM's default logprobs_mode="raw_logprobs": log_softmax of the model's logits
    before bias, penalties, temperature and filters; but after the runner's masks (banned ids, a
    grammar), so a constrained row's are over what the grammar allows: the model's choice among valid
    continuations, which the tool guard's call confidence reads (raw, a token the grammar forces
    reads p ~ 0 whenever the model would have formatted otherwise; the runner adds the pre-mask one
    where a request asks: SamplingParams.raw_logprobs). A temperature below GREEDY_EPS is greedy;
    greedy is the first maximum after bias and penalties. mirostat: per row its state
    (hearth.sample.mirostat), which the token sampled moves in place; None: every mirostat row at its start."""
    logprobs = logits.log_softmax(-1) if any(p.logprobs is not None for p in params) else None
    logits = apply_bias_and_penalties(logits, params, histories)
    tokens = first_max(logits)  # the first maximum, like argmax
    greedy = [p.greedy for p in params]
    if all(greedy):
        return tokens, logprobs
    probs = target_probs(logits, params, mirostat)
    # exponential race: argmax(p / E) with E ~ Exp(1) draws from p; one generator per row, and
    # greedy rows draw nothing, so a seeded row's noise never depends on its neighbours
    V = probs.shape[-1]
    noise = torch.stack([torch.ones(V) if g else torch.empty(V).exponential_(generator=gen)
                         for g, gen in zip(greedy, generators)])
    sampled = (probs / noise).argmax(-1)
    tokens = torch.where(torch.tensor(greedy), tokens, sampled)
    if mirostat is not None and any(st is not None for st in mirostat):
        mirostat_step(probs, tokens.tolist(), params, mirostat)
    return tokens, logprobs


def target_probs(logits: torch.Tensor, params: list[SamplingParams],
                 mirostat: list[MirostatState | None] | None = None) -> torch.Tensor:
    """logits: [S, V] after bias, penalties and DRY -> [S, V] the distribution each row samples from
    (temperature, then top-nσ / min-p / top-k / typical-p / top-p, renormalized, then XTC's mixture; a
    mirostat row's truncation by its state's mu instead, mirostat[i], None: its start); greedy rows at
    temperature 1, unused."""
    greedy = [p.greedy for p in params]
    V = logits.shape[-1]
    off = [g or p.mirostat != 0 for p, g in zip(params, greedy)]  # rows the filters leave alone
    temp = torch.tensor([1.0 if g else min(p.temperature, MAX_TEMPERATURE) for p, g in zip(params, greedy)])
    temp = temp.unsqueeze(1)
    tempered = logits / temp
    logits = tempered
    if any(p.top_n_sigma > 0 for p in params):
        logits = filter_top_n_sigma(logits, torch.tensor([-1.0 if o else p.top_n_sigma for p, o in zip(params, off)]))
    logits = filter_top_k_top_p_min_p(  # a top_k past V keeps all: clamped, so 10**20 is no int64 overflow
        logits,
        torch.tensor([0 if o else min(max(p.top_k, 0), V) for p, o in zip(params, off)]),
        torch.tensor([1.0 if o else p.top_p for p, o in zip(params, off)]),
        torch.tensor([0.0 if o else p.min_p for p, o in zip(params, off)]),
        torch.tensor([1.0 if o else p.typical_p for p, o in zip(params, off)]),
        temp.squeeze(1),
    )
    if not any(p.xtc and not o for p, o in zip(params, off)):
        probs = logits.softmax(-1)
    else:
        probs = xtc_mixture(logits, temp.squeeze(1),
                            torch.tensor([p.xtc_probability if p.xtc and not o else 0.0 for p, o in zip(params, off)]),
                            torch.tensor([p.xtc_threshold for p in params]))
    miro = [i for i, (p, g) in enumerate(zip(params, greedy)) if p.mirostat and not g]
    if miro:
        states = mirostat or [None] * len(params)
        mu = torch.tensor([(states[i] or start(params[i].mirostat_tau)).mu for i in miro])
        version = torch.tensor([params[i].mirostat for i in miro])
        probs[miro] = mirostat_probs(tempered[miro], version, mu)
    return probs


def mirostat_step(probs: torch.Tensor, tokens: list[int], params: list[SamplingParams],
                  mirostat: list[MirostatState | None] | None) -> None:
    """Each mirostat row's state moved by the token it sampled from probs [S, V] (target_probs')."""
    if mirostat is None:
        return
    for i, (p, t) in enumerate(zip(params, tokens)):
        if p.mirostat and not p.greedy and mirostat is not None and mirostat[i] is not None:
            update(mirostat[i], float(probs[i, t]), p.mirostat_tau, p.mirostat_eta)
