"""The draft's weights re-encoded at fewer bits (speculative_config.draft_quant): every matrix of more
bits than the type is encoded exactly as gguf's reference encoder does from the dequantized values,
the rest is left as it is; greedy output with such a draft equals plain greedy on a real model
(tests/spec_decode/test_draft_vocab.py, whose draft is reduced and re-encoded); a bad value is one
clear error naming the field."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import quants as gq

from hearth.backends import select
from hearth.loader.gguf_loader import GGUFFile
from hearth.runner.draft_quant import requantized
from hearth.spec_decode.config import InvalidSpeculativeConfig, SpeculativeConfig

from tests.gguf_factory import write_tiny_gguf


def reference(t, to):
    return gq.quantize(gq.dequantize(np.asarray(t.data), t.qtype).reshape(t.shape), to)


@pytest.mark.parametrize("tied", [True, False])
def test_wider_matrices_are_encoded_as_the_reference_encoder_does(tmp_path, tied):
    path = tmp_path / "t.gguf"
    write_tiny_gguf(path, "qwen2", qtype="Q8_0", tied=tied)
    g = GGUFFile(path)
    view = requantized(g, "q4_0", select())
    changed = {n for n in g.tensors if view.tensors[n] is not g.tensors[n]}
    for n in changed:
        t, new = g.tensors[n], view.tensors[n]
        assert t.qtype == Q.Q8_0 and new.qtype == Q.Q4_0 and new.shape == t.shape
        np.testing.assert_array_equal(new.data, reference(t, Q.Q4_0))
    matrices = {n for n, t in g.tensors.items() if len(t.shape) == 2 and t.qtype == Q.Q8_0}
    # the embedding table is re-encoded only where it is also the head
    assert changed == (matrices if tied else matrices - {"token_embd.weight"})
    assert "blk.0.ffn_down.weight" in changed and g.tensors is not view.tensors
    assert requantized(g, "q8_0", select()).tensors == g.tensors  # nothing holds more bits than Q8_0 here


@pytest.mark.parametrize("bad, why", [
    ({"method": "draft", "model": "x.gguf", "draft_quant": "q3_k"},
     r'speculative_config\.draft_quant must be one of q4_0, q5_0, q8_0 or "", got q3_k'),
    ({"method": "draft", "model": "x.gguf", "draft_quant": 4}, r"speculative_config\.draft_quant must be str"),
    ({"method": "ngram", "draft_quant": "q4_0"}, r'speculative_config\.draft_quant applies to method "draft" only'),
])
def test_bad_draft_quant_names_the_field(bad, why):
    with pytest.raises(InvalidSpeculativeConfig, match=why):
        SpeculativeConfig.parse(bad)
