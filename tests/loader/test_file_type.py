"""hearth.loader.file_type: a GGUF's quantization as llama.cpp names it, from its header."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from gguf import GGMLQuantizationType as Q

from hearth.loader.file_type import quantization


def _gguf(file_type=None, tensors=()):
    metadata = {} if file_type is None else {"general.file_type": file_type}
    return SimpleNamespace(metadata=metadata, tensors={f"t{i}": SimpleNamespace(shape=s, qtype=q)
                                                       for i, (s, q) in enumerate(tensors)})


@pytest.mark.parametrize("file_type,tensors,name", [
    (15, [((64, 64), Q.Q4_K), ((64, 96), Q.Q6_K)], "Q4_K_M"),  # the file's name, not its commonest matrix type
    (3, [], "Q4_1"),
    (0, [], "F32"),  # ALL_F32
    (None, [((64, 64), Q.Q4_K), ((64, 96), Q.Q6_K), ((10_000,), Q.F32)], "Q6_K"),  # matrices only, by weights
    (9999, [((8, 8), Q.Q8_0)], "Q8_0"),  # a type this gguf does not know
    (None, [], ""),
])
def test_quantization(file_type, tensors, name):
    assert quantization(_gguf(file_type, tensors)) == name
