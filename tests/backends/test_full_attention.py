"""Backend.full_attention (a vision tower's bidirectional attention): the CPU backend's native flash kernel
over the keys stored twice (hearth.backends.cpu_full_attention) against torch's SDPA in f32 on the same
bf16-exact inputs (max |err| 2-4e-3); f32 rows keep torch's SDPA. Broken by hand at these shapes: a window of
N - 1 (each row misses one key) 0.16-1.4 off, the keys stored once (causal) 2.4-3.7 off."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from hearth.backends import select
from hearth.backends.base import Backend
from hearth.backends.cpu_full_attention import full_attention_native
from hearth.kernels import native

TOL = 1e-2  # bf16 p with f32 sums on unit-variance bf16 rows (the prefill kernel's own tests: 5e-2)


def reference(q, k, v, scale):
    return F.scaled_dot_product_attention(*(t.float().transpose(0, 1)[None] for t in (q, k, v)), scale=scale)[0].transpose(0, 1)


def rows(n, heads, d, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, heads, d, generator=g).bfloat16() for _ in range(3)]


@pytest.mark.parametrize("n,heads,d", [(37, 4, 8), (256, 12, 64), (300, 16, 72), (64, 2, 128)])
def test_native_rows_equal_sdpa(n, heads, d):
    if not native.flash_prefill():
        pytest.skip("no flash prefill kernel on this CPU (AMX or AVX512-BF16)")
    q, k, v = rows(n, heads, d)
    scale = 1 / math.sqrt(d)
    got = full_attention_native(q, k, v, scale)
    assert got is not None and got.shape == (n, heads, d)
    assert float((got - reference(q, k, v, scale)).abs().max()) < TOL


def test_backend_full_attention_keeps_dtype_and_f32_exact():
    backend = select()
    q, k, v = rows(50, 4, 16, seed=1)
    want = reference(q, k, v, 0.25)
    got = backend.full_attention(q, k, v, 0.25)
    assert got.dtype == torch.bfloat16 and float((got.float() - want).abs().max()) < TOL
    qf, kf, vf = q.float(), k.float(), v.float()
    exact = backend.full_attention(qf, kf, vf, 0.25)  # f32 rows: torch's SDPA, as the base backend's
    assert exact.dtype == torch.float32 and torch.allclose(exact, Backend().full_attention(qf, kf, vf, 0.25), atol=1e-6)
    assert float((exact - want).abs().max()) < 1e-5
