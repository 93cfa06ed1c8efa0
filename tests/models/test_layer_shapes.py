"""A file whose tensors disagree with its header or with each other is refused at the load, naming the tensor and
what says otherwise: the native matmuls read past the weights (a glibc heap abort at Q8_0, a bare reshape error at
F32) or answered garbage (ffn_down with half its rows, attn_q with half its rows: no error at all)."""

from __future__ import annotations

import pytest

from hearth import LLM
from hearth.errors import ModelLoadError
from tests.gguf_factory import write_tiny_gguf


@pytest.mark.parametrize("qtype", ["F32", "Q8_0"])
def test_heads_the_tensors_do_not_hold_are_one_error(tmp_path, qtype):
    path = tmp_path / "odd.gguf"
    # 2 heads of 16 = 32, hidden 64, and no attention.key_length: the header's head_dim is 64 / 2 = 32
    write_tiny_gguf(path, "llama", qtype=qtype, heads=2, kv_heads=1, head_dim=16)
    with pytest.raises(ModelLoadError, match=r"blk\.0\.attn_output\.weight has shape \[64, 32\].*2 heads x "
                                             r"head_dim 32 \(llama\.attention\.key_length\) need 64 columns"):
        LLM(str(path), max_model_len=64, progress=False)


def test_kv_rows_are_checked_too(tmp_path):
    path = tmp_path / "odd.gguf"
    write_tiny_gguf(path, "qwen3", qtype="Q8_0", heads=2, kv_heads=1, head_dim=32,
                    adjust=lambda name, a: a[:16] if name == "blk.0.attn_v.weight" else a)
    with pytest.raises(ModelLoadError, match=r"blk\.0\.attn_v\.weight has shape \[16, 64\].*need 32 rows"):
        LLM(str(path), max_model_len=64, progress=False)


def _halved(name: str, axis: int):
    return lambda n, a: (a[:a.shape[0] // 2] if axis == 0 else a[:, :a.shape[1] // 2]) if n == name else a


@pytest.mark.parametrize("name, axis, says", [
    ("blk.1.ffn_down.weight", 0, r"blk\.1\.ffn_down\.weight has shape \[32, 128\], where the hidden size "
                                 r"\(llama\.embedding_length\) need 64 rows"),
    ("blk.0.ffn_down.weight", 1, r"blk\.0\.ffn_down\.weight has shape \[64, 64\], where blk\.0\.ffn_up\.weight's rows "
                                 r"need 128 columns"),
    ("blk.0.ffn_gate.weight", 0, r"blk\.0\.ffn_gate\.weight has shape \[64, 64\].*need 128 rows"),
    ("blk.0.attn_q.weight", 0, r"blk\.0\.attn_q\.weight has shape \[32, 64\], where the header's 2 heads x head_dim 32"),
    ("blk.0.attn_q.weight", 1, r"blk\.0\.attn_q\.weight has shape \[64, 32\], where the hidden size"),
])
def test_a_layers_matrices_agree_with_each_other_and_the_header(tmp_path, name, axis, says):
    path = tmp_path / "odd.gguf"
    write_tiny_gguf(path, "llama", qtype="Q8_0", heads=2, kv_heads=1, head_dim=32, adjust=_halved(name, axis))
    with pytest.raises(ModelLoadError, match=says):
        LLM(str(path), max_model_len=64, progress=False)

