"""Rope scaling a GGUF declares: Llama 3.1's (rope_freqs.weight) is computed (against transformers in
test_logits_vs_transformers' llama3-rope case); one hearth does not compute (YaRN) keeps the context
to the model's original length, said in one line, instead of running positions past it wrongly."""

from __future__ import annotations

import logging

from hearth.loader.gguf_loader import GGUFFile
from hearth.models.registry import model_class
from tests.gguf_factory import write_tiny_gguf


def config(path):
    g = GGUFFile(path)
    return model_class(g.arch).config_from_gguf(g)


def test_yarn_keeps_the_original_context(tmp_path, caplog):
    path = tmp_path / "yarn.gguf"
    write_tiny_gguf(path, "qwen2", context=256, yarn_original_context=64)
    with caplog.at_level(logging.WARNING, logger="hearth"):
        assert config(path).context_length == 64
    assert "rope scaling 'yarn' is not implemented: the context is kept to the model's original 64 tokens" in caplog.text


def test_linear_and_no_scaling_keep_the_files_context(tmp_path, caplog):
    for name, dims in (("plain", {}), ("linear", {"rope_scaling": 8.0})):
        write_tiny_gguf(tmp_path / f"{name}.gguf", "gemma3", context=256, **dims)
        with caplog.at_level(logging.WARNING, logger="hearth"):
            assert config(tmp_path / f"{name}.gguf").context_length == 256
    assert "not implemented" not in caplog.text
