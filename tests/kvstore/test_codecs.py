"""KV codecs against their references, cheapest first: ggml layouts bit-exact against gguf-py, every
fast path equal to its slow twin, round-trip error bounds on random data, and bytes equal to the
planner's."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType
from gguf.quants import dequantize, quantize

from hearth import LLM, SamplingParams
from hearth.kvstore.codecs import ALL_CODECS, QUANTIZED, get_codec
from hearth.kvstore.ggml import Q4_0, Q8_0
from hearth.kvstore.kvarn import KVarNKeys, KVarNValues, hadamard, pack, unpack
from hearth.errors import UnsupportedError
from tests.gguf_factory import write_tiny_gguf


def activations(m=2, bs=64, kvh=3, d=64, seed=0) -> torch.Tensor:
    """[m, bs, kvh, d]: gaussian with the outliers real K/V have: a hot channel and a loud token."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, bs, kvh, d, generator=g)
    x[..., 7] *= 10
    x[:, 3] *= 5
    return x


@pytest.mark.parametrize("codec,qtype", [(Q8_0(), GGMLQuantizationType.Q8_0), (Q4_0(), GGMLQuantizationType.Q4_0)])
def test_ggml_blocks_are_bit_exact_with_gguf(codec, qtype):
    x = activations(bs=16)
    x[0, 0, 0, :32] = 0.0  # an all-zero block: d = 0
    raw = codec.encode(x)["raw"]
    want = quantize(x.numpy().reshape(-1, 64), qtype)
    assert np.array_equal(raw.numpy().reshape(want.shape), want)
    back = codec.decode({"raw": raw})
    assert np.array_equal(back.numpy().reshape(-1, 64), dequantize(want, qtype))


@pytest.mark.parametrize("name", list(QUANTIZED))
def test_fast_paths_equal_their_slow_twins(name):
    codec = get_codec(name)
    x = activations(m=1, bs=64, kvh=2)
    for part in (codec.k, codec.v):
        fast, ref = part.encode(x), part.encode_ref(x)
        assert fast.keys() == ref.keys()
        for key in fast:
            a, b = fast[key], ref[key]
            if a.dtype.itemsize == 1:
                assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), (name, part.name, key)
            else:  # scales: the reference forms them in double precision before rounding to f16
                torch.testing.assert_close(a.float(), b.float(), rtol=2e-3, atol=1e-6)
        torch.testing.assert_close(part.decode(fast), part.decode_ref(fast), rtol=1e-6, atol=1e-6)


# relative round-trip error ||decode(encode(x)) - x|| / ||x|| on activations() (measured, then ~1.3x)
ROUND_TRIP = {"fp8_e4m3": (0.032, 0.032), "q8_0": (0.014, 0.014), "q4_0": (0.21, 0.21),
              "kvarn_k4v2": (0.11, 0.62), "kvarn_k4v4": (0.11, 0.11)}


@pytest.mark.parametrize("name", list(QUANTIZED))
def test_round_trip_error_bounds(name):
    codec = get_codec(name)
    x = activations(m=4, bs=64)
    for part, bound in zip((codec.k, codec.v), ROUND_TRIP[name]):
        err = float((part.decode(part.encode(x)) - x).norm() / x.norm())
        assert err <= bound, f"{name} {part.name}: {err:.4f} > {bound}"


def test_kvarn_balancing_beats_plain_round_to_nearest():
    """The point of the balancing: a loud token and a hot channel cost less than with the same grid
    and no balancing (0 iterations = plain asymmetric round-to-nearest)."""
    x = activations(m=4, bs=64)
    for part in (KVarNKeys, KVarNValues):
        errs = [float((q.decode(q.encode(x)) - x).norm() / x.norm()) for q in (part(4, 16), part(4, 0))]
        assert errs[0] < errs[1], (part.__name__, errs)


def test_pack_unpack_and_hadamard():
    for bits in (2, 4):
        codes = torch.randint(0, 1 << bits, (5, 64), dtype=torch.uint8)
        assert torch.equal(unpack(pack(codes, bits), bits), codes)
    h = hadamard(64)
    torch.testing.assert_close(h @ h, torch.eye(64), atol=1e-6, rtol=0)
    with pytest.raises(ValueError):
        hadamard(80)


@pytest.mark.parametrize("name", list(ALL_CODECS))
def test_block_bytes_equal_the_planners(name):
    codec = get_codec(name)
    kvh, d = 3, 64
    for bs in codec.format.tiles or (16, 32):
        planned = codec.format.token_layer_bytes(kvh, d, d, bs) * bs
        assert codec.block_bytes(bs, kvh, d) == planned


@pytest.mark.parametrize("d", [64, 128, 256])
def test_kvarn_k4v2_is_at_most_a_quarter_of_f16(d):
    for bs in (64, 128):
        assert get_codec("kvarn_k4v2").block_bytes(bs, 1, d) <= 0.25 * get_codec("f16").block_bytes(bs, 1, d)


def test_names_and_block_sizes():
    assert get_codec("auto").name == "f16" and get_codec("FP8").name == "fp8_e4m3"
    assert get_codec("kvarn_k4v2").block_size(None) == 128
    assert get_codec("kvarn_k4v2").block_size(16, 16) == 128  # the engine's default asks for nothing
    assert get_codec("kvarn_k4v2").block_size(64) == 64
    assert get_codec("q8_0").block_size(32) == 32
    with pytest.raises(UnsupportedError, match="128 or 64"):
        get_codec("kvarn_k4v4").block_size(32)
    with pytest.raises(UnsupportedError, match="not supported"):
        get_codec("int3")


@pytest.mark.parametrize("name", ["q8_0", "q4_0"])
def test_a_head_dim_no_ggml_block_fits_is_refused_by_name(tmp_path, name):
    """The tiny llama's head_dim of 16 holds no 32-value ggml block: its block cost 0 bytes and the
    LLM died dividing by it (ZeroDivisionError). Now the format's own one-line reason; a head_dim
    of 32 runs."""
    write_tiny_gguf(tmp_path / "d16.gguf", "llama")  # head_dim 16
    with pytest.raises(UnsupportedError, match=f"^{name} needs head_dim a multiple of 32, not 16$"):
        LLM(str(tmp_path / "d16.gguf"), kv_cache_dtype=name, max_model_len=64, progress=False)
    write_tiny_gguf(tmp_path / "d32.gguf", "llama", hidden=128, head_dim=32)
    llm = LLM(str(tmp_path / "d32.gguf"), kv_cache_dtype=name, max_model_len=64, max_num_seqs=1, progress=False)
    out = llm.generate({"prompt_token_ids": list(range(5, 40))}, SamplingParams(max_tokens=4, ignore_eos=True))
    assert len(out[0].outputs[0].token_ids) == 4
