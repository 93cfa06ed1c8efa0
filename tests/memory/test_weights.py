"""Weight bytes: exact from real GGUF files, and from descriptions with hand-computed answers."""

from __future__ import annotations

import gguf
import pytest

from hearth.memory.describe import describe
from hearth.memory.gguf_shape import shape_from_gguf
from hearth.memory.quant_mix import synthesize, use_more_bits
from hearth.memory.weights import (active_matmul_params, bytes_by_type, decode_weight_bytes, experts_touched,
                                   tensors_from_gguf, weight_bytes)

REAL = ["smollm2-135m", "gemma3-270m"]


@pytest.mark.parametrize("name", REAL)
def test_gguf_weight_bytes_are_exact(real_gguf, gguf_py_reader, name):
    g = real_gguf(name)
    tensors = tensors_from_gguf(g)
    reference = gguf_py_reader(name).tensors  # the gguf package's own byte count per tensor
    assert len(tensors) == len(reference)
    assert weight_bytes(tensors) == sum(int(t.n_bytes) for t in reference)
    # the rest of the file is metadata (vocabulary, template) and alignment: a few percent
    size = g.path.stat().st_size
    assert 0.97 * size < weight_bytes(tensors) < size


@pytest.mark.parametrize("name", REAL)
def test_description_of_a_real_file_reproduces_its_types(real_gguf, name):
    """The file's shape + its quant preset, synthesized by the llama.cpp type rules, gives the same
    bytes for every quantized type; only the F32 norm vectors an architecture adds (gemma3's q/k
    and sandwich norms) are missing from the description."""
    g = real_gguf(name)
    quant = gguf.LlamaFileType(g.get("general.file_type")).name.removeprefix("MOSTLY_")
    exact, described = bytes_by_type(tensors_from_gguf(g)), bytes_by_type(synthesize(shape_from_gguf(g), quant))
    assert {k: v for k, v in exact.items() if k != "F32"} == {k: v for k, v in described.items() if k != "F32"}
    assert abs(weight_bytes(synthesize(shape_from_gguf(g), quant)) / weight_bytes(tensors_from_gguf(g)) - 1) < 1e-3


def test_gemma3_sliding_pattern_matches_the_model(real_gguf):
    from hearth.models.gemma3 import Gemma3ForCausalLM

    g = real_gguf("gemma3-270m")
    shape, cfg = shape_from_gguf(g), Gemma3ForCausalLM.config_from_gguf(g)
    assert shape.sliding == cfg.sliding_window_pattern and shape.sliding_window == cfg.sliding_window == 512


def test_more_bits_layers():
    # 18 layers: the first 18 // 8 = 2, the last from 7 x 18 // 8 = 15 on, and (i - 2) % 3 == 2 between
    assert [i for i in range(18) if use_more_bits(i, 18)] == [0, 1, 4, 7, 10, 13, 15, 16, 17]


# Llama 2 7B in F16 (norm vectors F32), hand-computed:
#   embedding and head: 32,000 x 4,096 = 131,072,000 each
#   per layer: attention 4 x 4,096^2 = 67,108,864; MLP 3 x 4,096 x 11,008 = 135,266,304
#   matrices: 2 x 131,072,000 + 32 x 202,375,168 = 6,738,149,376 (the "6.7B")
#   F32 vectors: 32 x 2 x 4,096 + 4,096 = 266,240
LLAMA7B_MATRICES = 6_738_149_376
LLAMA7B_F16_BYTES = 2 * LLAMA7B_MATRICES + 4 * 266_240  # 13,477,363,712


def test_llama_7b_f16_bytes():
    shape, quant = describe("llama-7b,quant=F16")
    tensors = synthesize(shape, quant)
    assert weight_bytes(tensors) == LLAMA7B_F16_BYTES
    # decode reads everything but the embedding table, of which one row: 2 x 4,096 B
    assert decode_weight_bytes(tensors, shape) == LLAMA7B_F16_BYTES - 2 * 131_072_000 + 2 * 4096
    # FLOPs count every matrix but the embedding; prefill also leaves out the head
    assert active_matmul_params(tensors, shape, with_head=True) == LLAMA7B_MATRICES - 131_072_000
    assert active_matmul_params(tensors, shape, with_head=False) == LLAMA7B_MATRICES - 2 * 131_072_000


def test_llama_7b_iq4_xs_bytes():
    """IQ4_XS: 136 bytes per 256 weights (4.25 bits), the head Q6_K (210 per 256), as llama.cpp types them:
    embedding 131,072,000 x 136 / 256 = 69,632,000; head x 210 / 256 = 107,520,000; layers
    32 x 202,375,168 x 136 / 256 = 3,440,377,856; F32 vectors 4 x 266,240 (Llama-2-7B IQ4_XS files: ~3.6 GB)."""
    shape, quant = describe("llama-7b,quant=IQ4_XS")
    assert weight_bytes(synthesize(shape, quant)) == 69_632_000 + 107_520_000 + 3_440_377_856 + 4 * 266_240


def test_iq4_xs_rows_that_are_not_whole_superblocks_take_iq4_nl():
    """Rows of Qwen2.5-0.5B's 896 (3.5 superblocks) take IQ4_NL's 32-wide blocks, its 4,864-wide ffn_down
    (19 superblocks) stays IQ4_XS, and the Q6_K head falls back to Q8_0."""
    shape, quant = describe("layers=1,hidden=896,heads=14,kv_heads=2,ffn=4864,vocab=1000,quant=IQ4_XS")
    types = {t.name.split(".")[-2]: t.qtype.name for t in synthesize(shape, quant)}
    assert (types["ffn_up"], types["ffn_down"], types["output"]) == ("IQ4_NL", "IQ4_XS", "Q8_0")


def test_llama_70b_q4_k_m_is_the_size_of_the_real_files():
    shape, quant = describe("llama-70b")  # Q4_K_M by default
    # Llama-3.1-70B-Instruct-Q4_K_M.gguf files are 42.5 GB; weights are ~99.9% of them
    assert 42.0e9 < weight_bytes(synthesize(shape, quant)) < 43.0e9


# Mixtral 8x7B in Q8_0 (34 bytes per 32 weights; router and norms F32), hand-computed:
#   per layer: attention 2 x 4,096^2 + 2 x 4,096 x 1,024 = 41,943,040 weights
#              experts 8 x 3 x 4,096 x 14,336 = 1,409,286,144; router 4,096 x 8 = 32,768; norms 8,192
#   decode of one sequence reads 2 of 8 experts: 352,321,536
#     (41,943,040 + 352,321,536) x 34/32 + (32,768 + 8,192) x 4 = 418,906,112 + 163,840 = 419,069,952
#   x 32 layers = 13,410,238,464; + head 131,072,000 x 34/32 = 139,264,000; + one embedding row
#   4,096 x 34/32 = 4,352; + final norm 16,384  =>  13,549,523,200
#   all weights: 32 x ((41,943,040 + 1,409,286,144) x 34/32 + 163,840) + 2 x 139,264,000 + 16,384
#              = 32 x 1,542,094,848 + 278,544,384 = 49,625,579,520
def test_mixtral_reads_only_active_experts():
    shape, quant = describe("mixtral-8x7b,quant=Q8_0")
    tensors = synthesize(shape, quant)
    assert weight_bytes(tensors) == 49_625_579_520
    assert decode_weight_bytes(tensors, shape, concurrency=1) == 13_549_523_200
    # two sequences route to 1 - (6/8)^2 = 43.75% of the experts between them
    assert experts_touched(shape, 2) == 0.4375
    experts = 32 * 1_409_286_144 * 34 / 32
    assert decode_weight_bytes(tensors, shape, 2) == pytest.approx(
        13_549_523_200 - experts * 0.25 + experts * 0.4375 + 4352, rel=1e-12)  # and a second embedding row
