"""DRY, "don't repeat yourself" (pi6am's sampler for koboldcpp, as llama.cpp's llama_sampler_dry runs it):
where the window's last tokens repeat an earlier stretch of it, the token that followed that stretch would
extend the repeat; if the repeat is at least allowed_length tokens long, that token's logit loses
multiplier * base ** (length - allowed_length) (the exponent capped so the power stays a finite float32).

Sequence breakers (hearth.sample.dry_breakers) bound a repeat: it may not reach back past the last breaker
in the window, and a token that is a whole breaker on its own is never penalized. Per row the repeats are
found in plain Python over the window's token ids (a Z-function, O(window): suffix_matches); the penalties
then land in one batched op (hearth.sample.sampler)."""

from __future__ import annotations

import math

FLOAT_MAX_LOG = 88.7228391  # log of float32's max: llama.cpp's bound on base ** exponent
MAX_PENALTY = 1e30
"""The most DRY subtracts. multiplier * base ** exponent past float32's max was inf (and 1e300 ** 2 a Python
OverflowError that failed the engine step): a token at -inf, and a row whose every allowed token DRY hit (a
grammar's one choice) was all -inf, NaN, and drew a banned token. llama.cpp takes any multiplier and base, so it
is clamped, not refused: -1e30 already puts a token below every other, yet above a mask's -inf."""


def repeat_limit(window: list[int], breakers: dict[int, list[list[int]]]) -> int:
    """How far back a repeat may reach: the tokens after the last complete breaker in the window (all of
    them where none is). A breaker is a head token and one of its tails after it (llama.cpp's step 1: the
    breaker nearest the end wins, and of a head's tails the longest that matches)."""
    n = len(window)
    for i in range(n):  # i tokens after the head
        tails = breakers.get(window[n - 1 - i])
        if tails is None:
            continue
        matched = [len(t) for t in tails if len(t) <= i and window[n - i:n - i + len(t)] == t]
        if matched:
            return i - max(matched)
    return n


def suffix_matches(window: list[int], limit: int) -> list[int]:
    """[len(window)]: at position j the length of the longest stretch ending at j that also ends the window
    (the last position's own match left 0), capped at limit: the Z-function of the reversed window, as
    llama.cpp's step 2. Linear and sequential: plain Python beats torch ops here (a round of torch ops per
    repeated token measured ~20x slower on a window ending in a long repeat)."""
    r = window[::-1]
    n = len(r)
    z = [0] * n
    lo = hi = 0  # [lo, hi): the rightmost match box found
    for k in range(1, n):
        m = min(hi - k, z[k - lo]) if k < hi else 0
        while k + m < n and r[m] == r[k + m]:
            m += 1
        z[k] = m
        if k + m > hi:
            lo, hi = k, k + m
    return [min(z[n - 1 - j], limit) if j < n - 1 else 0 for j in range(n)]


def dry_penalties(window: list[int], breakers: dict[int, list[list[int]]], multiplier: float, base: float,
                  allowed_length: int) -> dict[int, float]:
    """token id -> what DRY subtracts from its logit, after `window` (the context's last tokens)."""
    n = len(window)
    if n <= allowed_length:
        return {}
    limit = repeat_limit(window, breakers)
    if limit < allowed_length:
        return {}
    longest: dict[int, int] = {}  # the token after each repeat -> the longest repeat it would extend
    lengths = suffix_matches(window, limit)
    for j in (j for j in range(n - 1) if lengths[j] and lengths[j] >= allowed_length):
        if lengths[j] > longest.get(window[j + 1], -1):
            longest[window[j + 1]] = lengths[j]
    max_exponent = int(FLOAT_MAX_LOG / math.log(base)) if base > 1.000001 else 0
    out = {}
    for token, length in longest.items():
        if [] in breakers.get(token, ()):  # a whole breaker on its own: never penalized
            continue
        exponent = length - allowed_length
        if max_exponent > 0:
            exponent = min(exponent, max_exponent)
        try:
            penalty = multiplier * base ** exponent
        except OverflowError:  # a base past ~1e154, where max_exponent is 0 (llama.cpp's pow gives inf)
            penalty = math.inf
        out[token] = min(penalty, MAX_PENALTY)
    return out
