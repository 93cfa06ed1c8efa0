"""The avx2 tier's kernel library (csrc/gguf_kernels_avx2.cpp) loaded beside the selected one
(native.open_tier): its GEMV against the exact twin (gguf-py's dequantization, an f64 matmul) and
against the AVX-512 library's GEMV for every block type, with ragged shapes; its rows independent
of the batch; and its build free of any AVX-512 flag, so a compiler without them still builds it.

From a plan's gemm_min_rows on (prefills) its int8 GEMM (csrc/gemm_avx2.h) runs: against the exact
twin with the GEMV's bound, against the GEMV on the same rows (test_native_gemm's bound: both take
the same integer dots, only the f32 sums run in another order), with and without AVX-VNNI (the same
integers, so the same bits), and each row independent of the other rows of the call.

The two GEMVs (below 10 rows, where the AVX-512 one takes no AMX tiles) quantize the activations to
the same bytes (ggml's q8_0 rule, a scale per 16 values) and take the same integer dot products per
16-weight group and superblock; they differ only in the order of the f32 sums (8 lanes here, 16
there), ~1e-7 relative per term: held to 1e-5 of sum(blockmax|x| |W|)."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from hearth.kernels import native, tiers
from hearth.layers.quant import as_bytes, block_format
from tests.kernels.test_native import assert_act8_close, block_max, widths
from tests.kernels.test_native_gemm import assert_near_gemv
from tests.layers.test_quant import E8M0_FIELDS, F16_FIELDS, native_quants, gguf_reference, random_tensor

QUANTS = native_quants("avx2")
pytestmark = pytest.mark.skipif(tiers.why_not("avx2") is not None, reason=f"tier avx2: {tiers.why_not('avx2')}")
AVX512 = tiers.why_not("avx512")


def matmul(tier: str, t, k: int, gemm_min_rows: int = 0) -> native.NativeMatmul:
    return native.NativeMatmul([(as_bytes(t.data, t.qtype), int(t.qtype))], k, gemm_min_rows, so=native.open_tier(tier))


def vnni_modes(so) -> list[int]:
    """The GEMM's integer dots to test here: AVX-VNNI where the CPU has it (the default), and the AVX2 pair."""
    return [1, 0] if so.hk_avx_vnni(-1) else [0]


@pytest.mark.parametrize("qtype", QUANTS, ids=lambda q: q.name)
def test_gemv_against_exact_twin_and_the_avx512_gemv(qtype):
    rng, g = np.random.default_rng(int(qtype) + 7), torch.Generator().manual_seed(int(qtype))
    for k in widths(qtype):
        for n in (37, 163):  # odd row counts: one run of rows, and four interleaved runs with a short last one
            t = random_tensor(qtype, n, k, rng)
            w = torch.from_numpy(gguf_reference(t))
            mm2 = matmul("avx2", t, k)
            mm5 = matmul("avx512", t, k) if AVX512 is None else None
            for m in range(1, 10):
                x = torch.randn(m, k, generator=g) * torch.rand(m, 1, generator=g) * 10
                y = mm2(x)
                assert_act8_close(y, x, w)
                if mm5 is not None:
                    bound = 1e-5 * (block_max(x).double() @ w.abs().double().T) + 1e-7
                    assert bool(((y.double() - mm5(x).double()).abs() <= bound).all())


@pytest.mark.parametrize("qtype", [Q.Q4_0, Q.Q8_0, Q.Q4_K, Q.Q6_K, Q.IQ4_XS, Q.MXFP4], ids=lambda q: q.name)
def test_rows_are_independent_of_the_batch(qtype):
    """One GEMV for every row count (no tiles on this tier): a row's bits are the same alone or
    among 1..63 others, so speculative verify rows equal decode rows."""
    t = random_tensor(qtype, 300, 512, np.random.default_rng(1))
    mm = matmul("avx2", t, 512)
    x = torch.randn(40, 512)
    alone = torch.cat([mm(x[i:i + 1]) for i in range(40)])
    for m in (2, 5, 9, 10, 17, 40):
        assert torch.equal(mm(x[:m]), alone[:m])


@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.Q5_K, Q.Q6_K], ids=lambda q: q.name)
def test_long_rows_alone_and_in_pairs(qtype):
    """Rows of K = 8960 (the 1.5B's down): at one activation row Q6_K's and Q5_K's two weight rows of a
    pass go one after the other (gemv_avx2.h PAIR_L1_BYTES: 2 x 7350 or 2 x 6160 weight bytes and the
    activations pass 24 KB), Q4_K's stay paired; Q4_K/Q5_K's scales unpacked in vector registers at one
    row (k4_words), in general ones at more: near the exact twin, and each row's bits the same in a
    call of 1, 2 or 3 (the second row of a single pass written to the first's place fails it)."""
    k = 8960
    t = random_tensor(qtype, 71, k, np.random.default_rng(int(qtype) + 3))  # 71 rows: 2 runs, the last one short
    w = torch.from_numpy(gguf_reference(t))
    mm = matmul("avx2", t, k)
    x = torch.randn(3, k, generator=torch.Generator().manual_seed(5)) * 4
    alone = torch.cat([mm(x[i:i + 1]) for i in range(3)])
    assert_act8_close(alone, x, w)
    for m in (2, 3):
        assert torch.equal(mm(x[:m]), alone[:m])


@pytest.mark.parametrize("code_byte", [0x00, 0xFF])
def test_gemv_q6k_int16_sums_at_the_codes_extremes(code_byte):
    """The GEMV adds Q6_K's products of 8 weights in int16 before subtracting 32 x the activations'
    sums (gemv_avx2.h words_dot): the sum of code x activation wraps (up to 8 x 63 x 127), the
    difference, sum((code - 32) x), does not (8 x 32 x 127 < 2^15). Every code 0 (-32) or 63 (+31)
    against activations at +-127, scales at -128 and 127: where a wrong order of the two would show."""
    t = random_tensor(Q.Q6_K, 19, 512, np.random.default_rng(23))
    blocks = t.data.reshape(-1, block_format(Q.Q6_K).type_size)
    blocks[:, :192] = code_byte  # ql, qh: every code 0 or 63
    blocks[0::2, 192:208] = 0x80  # int8 scales -128 in every other superblock, 127 in the rest
    blocks[1::2, 192:208] = 0x7F
    w = torch.from_numpy(gguf_reference(t))
    gemv = matmul("avx2", t, 512)
    x = torch.ones(13, 512) * torch.tensor([1.0, -1.0] * 6 + [0.5])[:, None]  # each row: all 127 or all -127
    x[12, ::2] = -0.5  # and one of alternating signs
    y = gemv(x)
    assert_act8_close(y, x, w)
    assert torch.equal(torch.cat([gemv(x[i:i + 1]) for i in range(13)]), y)


def test_the_flag_lists_are_separate():
    assert not any(f.startswith(("-mavx512", "-mamx")) for f in native.AVX2_LIBRARY.flags)
    assert {"-mavx2", "-mfma", "-mf16c"} <= set(native.AVX2_LIBRARY.flags)
    assert native.LIBRARIES["avx2"] is native.AVX2_LIBRARY and native.LIBRARIES["avx512"] is native.AVX512_LIBRARY
    assert native.sources(native.AVX2_LIBRARY) != native.sources(native.AVX512_LIBRARY)


def test_a_compiler_without_avx512_builds_the_avx2_tier(tmp_path, monkeypatch):
    """A compiler that rejects every AVX-512 and AMX flag (an old g++, clang for another target): the
    avx2 library builds (here: the fake compiler copies the real build), the AVX-512 one fails with
    the compiler's first error on one line."""
    built = native._build(native.AVX2_LIBRARY)  # the real library, from the cache
    cxx = tmp_path / "old-g++"
    cxx.write_text(f"""#!/bin/sh
out=""
for a in "$@"; do
  case "$a" in -mavx512*|-mamx*) echo "cc1plus: error: unrecognized command-line option '$a'" >&2; exit 1;; esac
  [ "$prev" = "-o" ] && out="$a"
  prev="$a"
done
cp '{built}' "$out"
""")
    cxx.chmod(cxx.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("CXX", str(cxx))
    monkeypatch.setenv("HEARTH_HOME", str(tmp_path / "home"))
    path = native._build(native.AVX2_LIBRARY)
    assert path.parent == tmp_path / "home" / "kernels" and path.read_bytes() == built.read_bytes()
    with pytest.raises(RuntimeError, match=r"^old-g\+\+ failed: cc1plus: error: unrecognized command-line option "
                                           r"'-mavx512f'$"):
        native._build(native.AVX512_LIBRARY)
    assert os.listdir(tmp_path / "home" / "kernels") == [path.name]  # no half-written library left


@pytest.mark.parametrize("qtype", QUANTS, ids=lambda q: q.name)
def test_gemm_against_exact_twin_and_the_gemv(qtype):
    """Every type, the widths of the GEMV's test; 37 outputs (4 panels of 8 and a ragged one of 5),
    row counts at the threshold and past it with tails of the 6-row block (13 = 2 * 6 + 1, 77 = 12 * 6 + 5);
    AVX-VNNI and the AVX2 pair give the same bits."""
    rng, g = np.random.default_rng(int(qtype) + 11), torch.Generator().manual_seed(int(qtype) + 1)
    so = native.open_tier("avx2")
    for k in widths(qtype):
        t = random_tensor(qtype, 37, k, rng)
        w = torch.from_numpy(gguf_reference(t))
        mm, gemv = matmul("avx2", t, k, gemm_min_rows=8), matmul("avx2", t, k)
        x = torch.randn(77, k, generator=g) * torch.rand(77, 1, generator=g) * 10
        try:
            ys = []
            for mode in vnni_modes(so):
                so.hk_avx_vnni(mode)
                for m in (8, 13, 77):
                    y = mm(x[:m])
                    assert_act8_close(y, x[:m], w)
                    assert_near_gemv(y, gemv(x[:m]), x[:m], w)
                ys.append(mm(x))
            assert all(torch.equal(y, ys[0]) for y in ys)
        finally:
            so.hk_avx_vnni(1)


@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_K, Q.Q6_K, Q.IQ4_NL, Q.IQ4_XS, Q.MXFP4], ids=lambda q: q.name)
def test_gemm_rows_are_independent_of_the_call_and_below_it_the_gemv_runs(qtype):
    """From gemm_min_rows (64, the runner's prefill regime) a row's bits do not depend on the other
    rows of the call (chunks and register blocks cut anywhere); below it every row is the GEMV's."""
    t = random_tensor(qtype, 45, 512, np.random.default_rng(3))
    mm, gemv = matmul("avx2", t, 512, gemm_min_rows=64), matmul("avx2", t, 512)
    x = torch.randn(300, 512)
    y = mm(x)
    for a, b in ((0, 64), (7, 71), (100, 300)):
        assert torch.equal(mm(x[a:b]), y[a:b])
    assert torch.equal(mm(x[:63]), gemv(x[:63]))
    assert not torch.equal(y[:64], gemv(x[:64]))  # the control: the GEMM sums in another order


@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_K], ids=lambda q: q.name)
def test_gemm_rows_are_independent_of_its_chunks(qtype):
    """A chunk's rows are repacked in blocks of 6 (one pointer per register block): chunks of 6, 12 and
    20 rows (a 2-row tail block in each 20), every row count to a partial block, give the bits of one chunk."""
    so = native.open_tier("avx2")
    t = random_tensor(qtype, 21, 512, np.random.default_rng(5))
    mm = native.NativeMatmul([(as_bytes(t.data, t.qtype), int(t.qtype))], 512, gemm_min_rows=8, so=so)
    x = torch.randn(101, 512) * torch.rand(101, 1) * 10
    per_row = 512 + 2 * (512 // 16) * 4  # a row's codes and its two scales per 16
    default = so.hk_gemm_chunk_bytes(0)
    try:
        y = mm(x)
        assert default > 101 * per_row  # the control: one chunk
        for rows in (6, 12, 20):
            so.hk_gemm_chunk_bytes(rows * per_row)
            assert torch.equal(mm(x), y) and torch.equal(mm(x[:95]), y[:95])
    finally:
        so.hk_gemm_chunk_bytes(default)


@pytest.mark.parametrize("qtype", QUANTS, ids=lambda q: q.name)
def test_gemm_int16_sums_at_the_codes_extremes(qtype):
    """Without AVX-VNNI the GEMM adds vpmaddubsw's int16 pairs in int16 as far as the codes' range
    allows (gemm_avx2.h gemm_chain: 4 for 4/5-bit codes and MXFP4's |values| <= 12, 2 for Q6_K, 1 for Q8_0
    and IQ4): every code at its largest magnitude (every byte 0xFF; Q8_0's -128, IQ4's index 0: -127, MXFP4's
    15: -12; an E8M0 scale kept finite) against activations at +-127 (constant rows) is
    where a sum too long would wrap. Random codes (the test above) never come near it."""
    rng = np.random.default_rng(int(qtype) + 21)
    t = random_tensor(qtype, 19, 512, rng)
    fmt, blocks = block_format(qtype), t.data.reshape(-1, block_format(qtype).type_size)
    scales = [i for at in F16_FIELDS[qtype] for i in (at, at + 1)] + [E8M0_FIELDS.get(qtype, -1)]  # kept finite
    codes = [i for i in range(fmt.type_size) if i not in scales]
    blocks[:, codes] = {Q.Q8_0: 0x80, Q.IQ4_NL: 0x00, Q.IQ4_XS: 0x00}.get(qtype, 0xFF)
    w = torch.from_numpy(gguf_reference(t))
    so = native.open_tier("avx2")
    mm, gemv = matmul("avx2", t, 512, gemm_min_rows=8), matmul("avx2", t, 512)
    x = torch.ones(13, 512) * torch.tensor([1.0, -1.0] * 6 + [0.5])[:, None]  # each row: all 127 or all -127
    x[12, ::2] = -0.5  # and one of alternating signs
    try:
        for mode in vnni_modes(so):
            so.hk_avx_vnni(mode)
            y = mm(x)
            assert_act8_close(y, x, w)
            assert_near_gemv(y, gemv(x), x, w)
    finally:
        so.hk_avx_vnni(1)
