"""One record per format (hearth.formats): every derived table reaches exactly the records, and the
C++ side's enums and dispatch (parsed from hearth/kernels/csrc) agree with the records' native ids,
so adding a format is one record plus its kernels, and a table that misses one fails here by name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as Q

import hearth
from hearth.formats import kv as kvrec
from hearth.formats.weights import TORCH_PATHS, WEIGHT_FORMATS, WeightFormat, native_ids
from hearth.kernels import native
from hearth.kvstore import codecs
from hearth.backends import cpu_linear
from hearth.layers import linear, quant
from hearth.memory import kv_formats, layouts

CSRC = Path(hearth.__file__).parent / "kernels" / "csrc"
NATIVE_WEIGHTS = {f.name: f.native_id for f in WEIGHT_FORMATS.values() if f.native}


def _enum(header: str, opening: str) -> dict[str, int]:
    """NAME = value pairs of the C++ enum that starts with `opening` in csrc/header."""
    text = (CSRC / header).read_text()
    start = text.index(opening)
    body = text[text.index("{", start) + 1:text.index("}", start)]
    return {name: int(value) for name, value in re.findall(r"(\w+)\s*=\s*(\d+)", body)}


def _with_includes(source: str, seen: set[str] | None = None) -> str:
    """A csrc file's text followed by that of the csrc headers it includes, recursively (the avx2 and
    neon libraries take their entry points from csrc/decode_library.h)."""
    seen = set() if seen is None else seen
    seen.add(source)
    text = (CSRC / source).read_text()
    for header in re.findall(r'#include "([\w.]+)"', text):
        if header not in seen and (CSRC / header).exists():
            text += "\n" + _with_includes(header, seen)
    return text


def _function(source: str, signature: str) -> str:
    """The body of the C++ function whose definition starts with `signature` (braces matched), in
    `source` or a csrc header it includes."""
    text = _with_includes(source)
    i = text.index("{", text.index(signature))
    depth, start = 0, i
    for j, c in enumerate(text[i:], i):
        depth += {"{": 1, "}": -1}.get(c, 0)
        if depth == 0:
            return text[start:j]
    raise AssertionError(f"{signature}: no closing brace")


# ---- weights ----

def test_cpp_type_enum_is_the_native_records():
    assert _enum("gguf_formats.h", "enum : int { Q4_0") == NATIVE_WEIGHTS


@pytest.mark.parametrize("tier", sorted(native.LIBRARIES))
def test_cpp_dispatch_covers_every_native_record(tier):
    """Every kernel library (one per tier group) dispatches every record native at its tiers (amx and
    avx512 share one: it dispatches those of either)."""
    source = native.LIBRARIES[tier].source
    cases = re.findall(r"case (\w+):", _function(source, "bool dispatch(int qtype"))
    tiers_of_source = [t for t, lib in native.LIBRARIES.items() if lib.source == source]
    assert sorted(cases) == sorted({f.name for f in WEIGHT_FORMATS.values() for t in tiers_of_source if f.native_at(t)})
    assert set(native_ids(tier).values()) <= set(cases)


def test_cpp_block_width_tables_follow_the_records():
    """is_paired (32-wide blocks) and is_k_quant (256-wide superblocks) restate block_size."""
    paired = re.findall(r"qtype == (\w+)", _function("gguf_formats.h", "inline bool is_paired(int qtype)"))
    superblocks = re.findall(r"qtype == (\w+)", _function("gguf_formats.h", "inline bool is_k_quant(int qtype)"))
    natives = [f for f in WEIGHT_FORMATS.values() if f.native]
    assert sorted(paired) == sorted(f.name for f in natives if f.block_size == 32)
    assert sorted(superblocks) == sorted(f.name for f in natives if f.block_size == 256)


def test_native_qtypes_are_derived():
    assert native.QTYPES == {v: k for k, v in NATIVE_WEIGHTS.items()}
    here = {v: k for k, v in native.qtypes().items()}
    assert {q for q, p in cpu_linear.native_paths().items() if p == "native"} == {Q[name] for name in here}


def test_codebook_formats_are_native_at_every_tier_but_amx():
    """A type a tier's kernels lack takes its torch path there (IQ4 and MXFP4 at amx: untested on AMX)."""
    for q in (Q.IQ4_NL, Q.IQ4_XS, Q.MXFP4):
        assert [t for t in native.LIBRARIES if WEIGHT_FORMATS[q].native_at(t)] == ["avx512", "avx2", "neon"]
        assert int(q) in native_ids("neon") and int(q) not in native_ids("amx")
    assert all(WEIGHT_FORMATS[Q.Q4_K].native_at(t) for t in native.LIBRARIES)


def test_every_record_has_a_torch_decoder_and_no_decoder_lacks_a_record():
    assert set(quant.BlockFormat.registry) == set(WEIGHT_FORMATS)
    for q, fmt in quant.BlockFormat.registry.items():
        r = WEIGHT_FORMATS[q]
        assert (fmt.block_size, fmt.type_size, fmt.group_size, fmt.q_bits, fmt.zero_code) == \
               (r.block_size, r.type_size, r.group_size, r.q_bits, r.zero_code)


def test_every_record_has_a_torch_path_and_a_planner_price():
    assert set(linear.TORCH_PATHS) == set(WEIGHT_FORMATS)
    assert set(TORCH_PATHS) <= set(linear.BUILDERS) and set(TORCH_PATHS) == set(layouts.TORCH_HELD)
    assert set(layouts.LAYOUTS["hearth-cpu-torch"].held) == set(WEIGHT_FORMATS)


def test_records_agree_with_gguf_py():
    for q, r in WEIGHT_FORMATS.items():
        assert GGML_QUANT_SIZES[q] == (r.block_size, r.type_size), r.name
        assert all(0 <= at <= r.type_size - 2 for at in r.f16_at), r.name


def test_a_record_that_contradicts_gguf_py_is_refused():
    with pytest.raises(ValueError, match="Q4_0.*gguf-py"):
        WeightFormat(Q.Q4_0, 32, 20, "int4x1", 32, 4)
    with pytest.raises(ValueError, match="torch_path"):
        WeightFormat(Q.Q4_0, 32, 18, "int3", 32, 4)


# ---- KV cache ----

def test_cpp_kv_enum_is_the_native_sides():
    """csrc/kv_decode.h's KvqFormat: the same ids, each named KVQ_ + the side's name (or its first words:
    KVQ_FP8 for fp8_e4m3)."""
    cpp = _enum("kv_decode.h", "enum KvqFormat")
    sides = {s.name: s.native_id for s in kvrec.sides().values() if s.native_id is not None}
    assert sorted(cpp.values()) == sorted(sides.values())
    by_id = {v: k.removeprefix("KVQ_").lower() for k, v in cpp.items()}
    for name, i in sides.items():
        assert name == by_id[i] or name.startswith(by_id[i] + "_"), (name, by_id[i])


def test_native_kv_ids_are_derived():
    assert native.KVQ_FORMATS == {s.name: s.native_id for s in kvrec.sides().values()
                                  if s.native_id is not None and s is not kvrec.STAGING}


def test_every_served_kv_record_is_a_codec_and_every_codec_a_record():
    assert set(codecs.ALL_CODECS) == {n for n, f in kvrec.KV_FORMATS.items() if f.served}
    assert kv_formats.KV_FORMATS is kvrec.KV_FORMATS  # the planner prices the same records
    for name, codec in codecs.ALL_CODECS.items():
        f = kvrec.KV_FORMATS[name]
        assert codec.format is f and codec.quantized == f.quantized
        assert codec.staging_blocks == f.staging_blocks
        if f.quantized:
            assert (codec.k.name, codec.v.name) == (f.k.name, f.v.name)
            assert (codec.sink, codec.rotate, codec.tiles) == (f.sink, f.rotate, f.tiles)


def test_every_quantized_side_has_a_torch_codec():
    quantized = {s.name for f in kvrec.KV_FORMATS.values() if f.quantized for s in (f.k, f.v)}
    assert set(codecs.QUANTIZERS) == quantized
    assert set(native.KVQ_FORMATS) <= quantized


def test_quantized_sides_have_native_readers():
    """Every quantized format hearth serves is read in place by the C++ attention (a new format
    that is not must say so here)."""
    for name, codec in codecs.QUANTIZED.items():
        assert native.kvq_formats(codec) is not None, name


def test_a_head_of_two_int4_planes_is_int8_rows_below_avx512():
    # the int4pack kernel is compute-bound with AVX2: two planes cost twice one (hearth.formats.weights)
    q8 = WEIGHT_FORMATS[Q.Q8_0]
    assert q8.torch_head_path("AVX512") == "int4x2"
    assert q8.torch_head_path("AVX2") == q8.torch_head_path("DEFAULT") == "int8"
    assert WEIGHT_FORMATS[Q.Q4_K].torch_head_path("AVX2") == "int4x1"  # one plane stays
    assert WEIGHT_FORMATS[Q.Q6_K].torch_head_path("AVX512") == "int8"
