"""hearth.layers.quant against gguf-py's dequantizer: bit-exact (compared as uint32 bit patterns,
so even signed zeros agree) for every supported type. The real files' tensors are checked the same
way in test_linear.py (which opens each file once)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize as gguf_dequantize
from gguf.quants import quantize as gguf_quantize

from hearth.errors import UnsupportedError
from hearth.formats.weights import WEIGHT_FORMATS
from hearth.kernels import tiers
from hearth.layers.quant import SUPPORTED, affine_rows, as_bytes, block_format, dequantize
from hearth.loader.gguf_loader import GGUFTensor
from tests.iq4_quantize import QUANTIZERS

# byte offsets of the f16 scale fields inside one block: random bytes there could be inf/nan
F16_FIELDS = {q: f.f16_at for q, f in WEIGHT_FORMATS.items() if f.group_size}
FLOATS = (Q.F32, Q.F16, Q.BF16)
QUANTS = tuple(F16_FIELDS)


def native_quants(tier: str) -> tuple[Q, ...]:
    """The types native tier `tier`'s kernels read (tests/kernels); the others run on their torch path."""
    return tuple(q for q in QUANTS if WEIGHT_FORMATS[q].native_at(tier))


NATIVE_QUANTS = native_quants(tiers.selected().name)
"""Those of the selected tier (amx shares avx512's library but not IQ4's records: amx tests skip them)."""
EXTREME_F16 = (65504.0, -65504.0, 6e-8, -6e-8, 0.0, -0.0, 1.0)  # largest, smallest subnormal, signed zeros
E8M0_FIELDS = {Q.MXFP4: 0}
"""Byte offset of a power-of-two (E8M0) scale in one block: random bytes there reach 2**127, whose products overflow."""
EXTREME_E8M0 = (0, 1, 2, 127, 128, 254, 255)  # the two subnormal scales, 2**-126, 1/2, 1, 2**126, 2**127 (x12: inf)


def random_tensor(qtype: Q, rows: int, cols: int, rng: np.random.Generator,
                  scale: float = 0.01) -> GGUFTensor:
    """A [rows, cols] tensor as the loader hands it out: random codes with finite f16 scales, or
    random floats for the plain float types."""
    if qtype in FLOATS:
        w = rng.normal(0, 1.0, (rows, cols)).astype(np.float32)
        data = {Q.F32: w, Q.F16: w.astype(np.float16)}.get(qtype)
        data = gguf_quantize(w, Q.BF16) if data is None else data  # BF16 comes as raw uint8
        return GGUFTensor("w", qtype, (rows, cols), data)
    fmt = block_format(qtype)
    raw = rng.integers(0, 256, (rows, cols // fmt.block_size * fmt.type_size), dtype=np.uint8)
    blocks = raw.reshape(-1, fmt.type_size)
    for at in F16_FIELDS[qtype]:
        d = rng.normal(0, scale, (blocks.shape[0], 1)).astype(np.float16)
        blocks[:, at:at + 2] = d.view(np.uint8)
    if qtype in E8M0_FIELDS:  # 2**-10 .. 2**-4 (halved): weights up to 12x that, like an f16 scale's ~0.01
        blocks[:, E8M0_FIELDS[qtype]] = rng.integers(118, 125, blocks.shape[0])
    return GGUFTensor("w", qtype, (rows, cols), raw)


def gguf_reference(t: GGUFTensor) -> np.ndarray:
    return gguf_dequantize(t.data, t.qtype).reshape(t.shape).astype(np.float32)


def assert_bit_exact(ours: torch.Tensor, ref: np.ndarray) -> None:
    ours = ours.reshape(ref.shape).numpy()
    assert np.array_equal(ours.view(np.uint32), ref.view(np.uint32))


def test_every_listed_type_is_covered():
    assert set(SUPPORTED) == set(FLOATS) | set(QUANTS)


@pytest.mark.parametrize("qtype", FLOATS + QUANTS, ids=lambda q: q.name)
def test_random_blocks_bit_exact(qtype):
    t = random_tensor(qtype, 7, 512, np.random.default_rng(int(qtype)))
    assert_bit_exact(dequantize(t.data, t.qtype), gguf_reference(t))


@pytest.mark.parametrize("qtype", QUANTS, ids=lambda q: q.name)
def test_extreme_scales_bit_exact(qtype):
    """f16 scales at the largest and smallest magnitudes and signed zeros, with the extreme codes (every
    code byte 0x00 or 0xFF: IQ4's first and last codebook values, IQ4_XS's 6-bit sub-scales 0 and 63)."""
    rng = np.random.default_rng(int(qtype) + 7)
    t = random_tensor(qtype, 2 * len(EXTREME_F16), 512, rng)
    blocks = t.data.reshape(-1, block_format(qtype).type_size)
    f16 = {i for at in F16_FIELDS[qtype] for i in (at, at + 1)}
    f16 |= {E8M0_FIELDS[qtype]} if qtype in E8M0_FIELDS else set()  # scale bytes, set below
    codes = [i for i in range(blocks.shape[1]) if i not in f16]
    blocks[0::2, codes], blocks[1::2, codes] = 0x00, 0xFF
    for at in F16_FIELDS[qtype]:
        d = np.resize(np.array(EXTREME_F16, dtype=np.float16), blocks.shape[0]).reshape(-1, 1)
        blocks[:, at:at + 2] = rng.permutation(d).view(np.uint8)
    if qtype in E8M0_FIELDS:
        blocks[:, E8M0_FIELDS[qtype]] = rng.permutation(np.resize(np.array(EXTREME_E8M0, dtype=np.uint8), len(blocks)))
    assert_bit_exact(dequantize(t.data, t.qtype), gguf_reference(t))


@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.MXFP4], ids=lambda q: q.name)
def test_gguf_quantized_weights_bit_exact(qtype):
    """Codes from gguf's own quantizer (realistic, including all-equal blocks with zero scale)."""
    w = np.random.default_rng(1).normal(0, 0.05, (6, 256)).astype(np.float32)
    w[0, :32] = 0.25  # a constant block
    data = gguf_quantize(w, qtype)
    assert_bit_exact(dequantize(data, qtype), gguf_dequantize(data, qtype).astype(np.float32))


@pytest.mark.parametrize("qtype", [Q.IQ4_NL, Q.IQ4_XS], ids=lambda q: q.name)
def test_iq4_encoded_weights_bit_exact(qtype):
    """Codes as an encoder chooses them (tests/iq4_quantize: gguf-py has none), a zero block included."""
    w = np.random.default_rng(1).normal(0, 0.05, (6, 512)).astype(np.float32)
    w[0, :256] = 0.0
    data = QUANTIZERS[qtype](w)
    ours = dequantize(data, qtype)
    assert_bit_exact(ours, gguf_dequantize(data, qtype).astype(np.float32))
    assert float((ours.numpy() - w).std()) < 0.15 * float(w.std())  # the encoder is a real 4-bit one


@pytest.mark.parametrize("qtype", QUANTS, ids=lambda q: q.name)
def test_affine_form_is_what_repacking_reads(qtype):
    """q fits its bit width; symmetric formats' offsets are -zero_code * scale; w == scale*q + offset."""
    t = random_tensor(qtype, 3, 256, np.random.default_rng(2))
    fmt = block_format(qtype)
    q, s, o = affine_rows(as_bytes(t.data, qtype), qtype)
    assert q.shape == (3, 256) and s.shape == o.shape == (3, 256 // fmt.group_size)
    assert int(q.max()) < 2 ** fmt.q_bits
    if fmt.zero_code is not None:
        assert torch.equal(o, -fmt.zero_code * s)
    w = s.repeat_interleave(fmt.group_size, 1) * q.float() + o.repeat_interleave(fmt.group_size, 1)
    ref = torch.from_numpy(gguf_reference(t))
    assert torch.allclose(w, ref, rtol=0, atol=1e-6 * float(ref.abs().max()))


def test_unsupported_type_names_it_and_lists_supported():
    with pytest.raises(UnsupportedError, match=r"IQ2_XXS is not supported; hearth supports: .*Q8_0.*Q4_K"):
        dequantize(np.zeros((1, 66), dtype=np.uint8), Q.IQ2_XXS)
