"""KL divergence from a reference distribution kept as its top-K tokens (numpy only, so the llama.cpp
goldens script can load this file by path without importing hearth).

KL(P || Q) is taken over the reference's K most likely tokens plus one bucket holding the rest of the
vocabulary: the exact KL between the two coarse-grained distributions, never above the full KL (the
log-sum inequality), and the same statistic for every engine it compares."""

from __future__ import annotations

import numpy as np

TINY = 1e-12


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """[N, V] raw logits -> [N, V] float64 log-probabilities."""
    x = np.asarray(logits, dtype=np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def lumped_kl_of_logits(ref_ids: np.ndarray, ref_logprobs: np.ndarray, logits: np.ndarray) -> np.ndarray:
    """lumped_kl(ref_ids, ref_logprobs, log_softmax(logits)), bit for bit, from raw logits [N, V]: one float64
    copy normalized in place and only the K picked log-probabilities formed (~8x less time at 152K tokens)."""
    x = np.array(logits, dtype=np.float64)
    top = x.max(axis=-1, keepdims=True)
    picked = np.take_along_axis(x, np.asarray(ref_ids, dtype=np.int64), axis=-1) - top
    np.subtract(x, top, out=x)
    np.exp(x, out=x)
    return _lumped(ref_logprobs, picked - np.log(x.sum(axis=-1, keepdims=True)))


def lumped_kl(ref_ids: np.ndarray, ref_logprobs: np.ndarray, logprobs: np.ndarray) -> np.ndarray:
    """ref_ids, ref_logprobs: [N, K] the reference's top-K; logprobs: [N, V] the engine's full
    log-probabilities at the same N positions -> [N] KL(P || Q) in nats."""
    lq = np.take_along_axis(np.asarray(logprobs, dtype=np.float64), np.asarray(ref_ids, dtype=np.int64), axis=-1)
    return _lumped(ref_logprobs, lq)


def _lumped(ref_logprobs: np.ndarray, lq: np.ndarray) -> np.ndarray:
    """[N, K] reference and engine log-probabilities of the reference's top-K tokens -> [N] KL in nats."""
    lp = np.asarray(ref_logprobs, dtype=np.float64)
    p = np.exp(lp)
    kl = (p * (lp - lq)).sum(-1)
    p_rest = np.clip(1.0 - p.sum(-1), TINY, None)
    q_rest = np.clip(1.0 - np.exp(lq).sum(-1), TINY, None)
    return kl + p_rest * (np.log(p_rest) - np.log(q_rest))
