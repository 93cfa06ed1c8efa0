"""hearth's one-pass GGUF parser reads exactly what gguf-py's GGUFReader reads."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from hearth.loader.gguf_loader import GGUFFile, head_tensor
from tests.gguf_factory import write_tiny_gguf


def assert_same_as_gguf_py(path, ref: gguf.GGUFReader | None = None) -> None:
    ours, ref = GGUFFile(path), ref or gguf.GGUFReader(path)
    for key, field in ref.fields.items():
        if key.startswith("GGUF."):
            continue
        got = ours.field_array(key)
        got, want = got.tolist() if isinstance(got, np.ndarray) else got, field.contents()
        # exact first: approx's per-element objects cost seconds on a 262K-token vocabulary (gemma3)
        assert got == want or got == pytest.approx(want), key
    assert list(ours.tensors) == [t.name for t in ref.tensors]
    for t in ref.tensors:
        o = ours.tensors[t.name]
        assert o.qtype == t.tensor_type and o.shape == tuple(reversed(t.shape.tolist()))
        assert o.data.dtype == t.data.dtype and o.data.shape == t.data.shape
        assert np.array_equal(o.data, t.data), t.name


@pytest.mark.parametrize("arch,qtype", [("llama", "F32"), ("gemma3", "Q8_0"), ("qwen3", "F16")])
def test_tiny_files(tmp_path, arch, qtype):
    path = tmp_path / "m.gguf"
    write_tiny_gguf(path, arch, qtype=qtype)
    assert_same_as_gguf_py(path)


@pytest.mark.parametrize("tied,expected", [(True, "token_embd.weight"), (False, "output.weight")])
def test_head_tensor_is_the_output_matrix_or_the_tied_embedding(tmp_path, tied, expected):
    path = tmp_path / "m.gguf"
    write_tiny_gguf(path, "llama", tied=tied)
    g = GGUFFile(path)
    assert head_tensor(g).name == expected and ("output.weight" in g.tensors) != tied


@pytest.mark.parametrize("name", ["smollm2-135m", "gemma3-270m"])
def test_real_files(model_path, gguf_py_reader, name):
    assert_same_as_gguf_py(model_path(name), gguf_py_reader(name))
