"""The draft's weights re-encoded at fewer bits (speculative_config.draft_quant): every matrix of more
bits than the type is encoded exactly as gguf's reference encoder does from the dequantized values,
the rest is left as it is, and a second load maps the cached encoding; greedy output with such a
draft equals plain greedy on a real model (tests/spec_decode/test_draft_vocab.py, whose draft is
reduced and re-encoded); a bad value is one clear error naming the field."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import quants as gq

from hearth.backends import select
from hearth.layers import repack_cache
from hearth.loader.gguf_loader import GGUFFile
from hearth.runner import draft_quant
from hearth.runner.draft_quant import requantized
from hearth.spec_decode.config import InvalidSpeculativeConfig, SpeculativeConfig

from tests.gguf_factory import SPECULATES, write_tiny_gguf


def reference(t, to):
    return gq.quantize(gq.dequantize(np.asarray(t.data), t.qtype).reshape(t.shape).astype(np.float32), to)


@pytest.mark.parametrize("qtype", ["F32", "F16", "Q8_0"])
@pytest.mark.parametrize("tied", [True, False])
def test_wider_matrices_are_encoded_as_the_reference_encoder_does(tmp_path, monkeypatch, qtype, tied):
    monkeypatch.setattr(draft_quant, "CHUNK_ROWS", 48)  # several chunks, the last one short
    path = tmp_path / "t.gguf"
    write_tiny_gguf(path, "qwen2", qtype=qtype, tied=tied)
    g = GGUFFile(path)
    view = requantized(g, "q4_0", select())
    changed = {n for n in g.tensors if view.tensors[n] is not g.tensors[n]}
    for n in changed:
        t, new = g.tensors[n], view.tensors[n]
        assert new.qtype == Q.Q4_0 and new.shape == t.shape
        np.testing.assert_array_equal(new.data, reference(t, Q.Q4_0))
    matrices = {n for n, t in g.tensors.items() if len(t.shape) == 2}
    # the embedding table is re-encoded only where it is also the head
    assert changed == (matrices if tied else matrices - {"token_embd.weight"})
    assert g.tensors is not view.tensors


def test_narrower_types_and_partial_blocks_are_left_as_they_are(tmp_path):
    write_tiny_gguf(tmp_path / "f.gguf", "qwen2", qtype="F32", ffn=80)  # ffn_down's rows of 80: no whole 32-blocks
    g = GGUFFile(tmp_path / "f.gguf")
    view = requantized(g, "q4_0", select())
    assert view.tensors["blk.0.ffn_down.weight"] is g.tensors["blk.0.ffn_down.weight"]
    assert view.tensors["blk.0.ffn_up.weight"].qtype == Q.Q4_0
    write_tiny_gguf(tmp_path / "q.gguf", "qwen2", qtype="Q8_0")
    g = GGUFFile(tmp_path / "q.gguf")
    assert requantized(g, "q8_0", select()).tensors == g.tensors  # nothing holds more bits than Q8_0


def test_a_second_load_maps_the_cached_encoding_of_its_own_type(tmp_path, monkeypatch):
    monkeypatch.setenv("HEARTH_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(repack_cache, "MIN_FILE_BYTES", 0)  # the test file is tiny
    monkeypatch.setattr(repack_cache, "_pruned", set())
    path = tmp_path / "t.gguf"
    write_tiny_gguf(path, "qwen2", qtype="F32")
    built = []
    encode = gq.quantize
    monkeypatch.setattr(gq, "quantize", lambda *a: built.append(a[1]) or encode(*a))
    first = requantized(GGUFFile(path), "q4_0", select())
    n = len(built)
    again = requantized(GGUFFile(path), "q4_0", select())
    assert n > 0 and len(built) == n  # mapped, not encoded again
    for name, t in first.tensors.items():
        np.testing.assert_array_equal(again.tensors[name].data, t.data)
    q5 = requantized(GGUFFile(path), "q5_0", select())  # another type: its own entries
    assert len(built) == 2 * n and q5.tensors["blk.0.ffn_up.weight"].qtype == Q.Q5_0


@pytest.mark.parametrize("bad, why", [
    ({"method": "draft", "model": "x.gguf", "draft_quant": "q3_k"},
     r"""speculative_config\.draft_quant must be one of q4_0, q5_0, q8_0 or "", got 'q3_k'"""),
    ({"method": "draft", "model": "x.gguf", "draft_quant": 4}, r"speculative_config\.draft_quant must be str"),
    ({"method": "ngram", "draft_quant": "q4_0"}, r'speculative_config\.draft_quant applies to method "draft" only'),
])
def test_bad_draft_quant_names_the_field(bad, why):
    with pytest.raises(InvalidSpeculativeConfig, match=why):
        SpeculativeConfig.parse(bad)


def test_where_speculation_is_off_the_draft_is_neither_re_encoded_nor_loaded(tmp_path, monkeypatch, caplog):
    """The torch device (as the torch CPU tier) computes verify rows unlike decode rows: the engine
    turns speculation off before the draft's weights are read, so draft_quant's encoding (the
    load's slowest part) is never paid for nothing; with the native kernels the same config does."""
    import logging

    from hearth import LLM
    from hearth import llm as llm_module
    from hearth import llm_draft
    from hearth.kernels import native

    target, draft = tmp_path / "t.gguf", tmp_path / "d.gguf"
    write_tiny_gguf(target, "qwen2", qtype="Q8_0", **SPECULATES)  # the native kernels' type (the control below)
    write_tiny_gguf(draft, "qwen2", qtype="F32", **SPECULATES)  # the same vocabulary, every matrix wider than Q4_0
    spec = {"method": "draft", "model": str(draft), "num_speculative_tokens": 2, "draft_quant": "q4_0"}
    encoded, loaded = [], []
    monkeypatch.setattr(llm_draft, "requantized", lambda g, *a: encoded.append(g.path) or requantized(g, *a))
    load = llm_module.load_model
    for module in (llm_module, llm_draft):  # the target's load, the draft's
        monkeypatch.setattr(module, "load_model", lambda g, *a, **k: loaded.append(g.path) or load(g, *a, **k))
    monkeypatch.setenv("HEARTH_HOME", str(tmp_path / "home"))  # the encoding's cache stays in the test's dir
    with caplog.at_level(logging.WARNING, logger="hearth"):
        llm = LLM(str(target), device="torch", progress=False, speculative_config=spec)
    assert encoded == [] and loaded == [target] and llm.runner.drafter is None and llm.engine.spec is None
    assert any("speculative decoding is off" in r.getMessage() and "the draft model is not loaded" in r.getMessage()
               for r in caplog.records)
    if native.available():  # the control: where speculation runs, the draft is encoded and loaded
        llm = LLM(str(target), device="cpu", progress=False, speculative_config=spec)
        assert encoded == [draft] and loaded[1:] == [target, draft] and llm.runner.drafter is not None
