"""Attention sinks (gpt-oss): the flash path (SDPA's output times sigmoid(lse - sink), from torch's CPU flash
kernel) against its slow twin, explicit f32 scores with the sink as one more logit per head."""

from __future__ import annotations

import pytest
import torch

from hearth.kernels.attention import _attend_sinks, _sdpa


@pytest.mark.parametrize("n_q,ctx,window", [(7, 7, 0), (5, 40, 0), (24, 24, 8), (1, 33, 8)])
def test_flash_with_lse_equals_explicit_scores(n_q, ctx, window):
    g = torch.Generator().manual_seed(n_q * 100 + ctx)
    heads, kvh, d = 8, 2, 32
    q, k, v = (torch.randn(h, n, d, generator=g) * 2 for h, n in ((heads, n_q), (kvh, ctx), (kvh, ctx)))
    sinks = torch.randn(heads, generator=g) * 3
    qpos, kpos = torch.arange(ctx - n_q, ctx).unsqueeze(1), torch.arange(ctx).unsqueeze(0)
    seen = (kpos <= qpos) & ((qpos - kpos < window) if window else True)  # [n_q, ctx]
    additive = None if n_q == ctx and not window else torch.zeros(n_q, ctx).masked_fill(~seen, float("-inf"))
    want = _sdpa(q, k, v, seen, d ** -0.5, 0.0, sinks)
    torch.testing.assert_close(_attend_sinks(q, k, v, additive, d ** -0.5, sinks), want, rtol=1e-5, atol=1e-6)
    plain = _sdpa(q, k, v, seen, d ** -0.5, 0.0)
    assert (plain - want).abs().max() > 0.05  # the sinks matter here
