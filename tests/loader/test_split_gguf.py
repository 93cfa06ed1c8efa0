"""A model in several GGUF files (llama.cpp's gguf-split / a converter's --split-max-tensors:
NAME-00001-of-0000N.gguf, ...): opened from the first, it is the same model as in one file (every
tensor, byte for byte; the same logits through the engine); a later part or a missing part is one
clear error."""

from __future__ import annotations

import numpy as np
import pytest

from hearth import LLM, SamplingParams
from hearth.errors import ModelLoadError
from hearth.loader.gguf_loader import GGUFFile
from tests.gguf_factory import write_tiny_gguf


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("split")
    write_tiny_gguf(d / "whole.gguf", "llama", qtype="Q8_0")
    write_tiny_gguf(d / "model.gguf", "llama", qtype="Q8_0", split_max_tensors=8)
    parts = sorted(d.glob("model-*.gguf"))
    assert [p.name for p in parts] == [f"model-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    return d / "whole.gguf", parts


def test_the_first_part_brings_every_tensor(files):
    whole, parts = files
    one, split = GGUFFile(whole), GGUFFile(parts[0])
    assert split.parts == parts and split.arch == one.arch
    assert split.tensors.keys() == one.tensors.keys()
    for name, t in one.tensors.items():
        assert split.tensors[name].qtype == t.qtype and np.array_equal(split.tensors[name].data, t.data), name
    assert split.file_size == sum(p.stat().st_size for p in parts)


def test_the_engine_runs_it_as_one_file(files):
    whole, parts = files
    params = SamplingParams(max_tokens=6, temperature=0.0, logprobs=1)
    outs = [LLM(str(p), max_model_len=128, progress=False).generate([{"prompt_token_ids": [5, 6, 7]}], params)[0]
            for p in (whole, parts[0])]
    assert outs[0].outputs[0].token_ids == outs[1].outputs[0].token_ids
    assert outs[0].outputs[0].logprobs == outs[1].outputs[0].logprobs


def test_a_later_or_missing_part_is_one_line(files, tmp_path):
    _, parts = files
    with pytest.raises(ModelLoadError, match="file 2 of a model split in 3: give the first, NAME-00001-of-00003.gguf"):
        GGUFFile(parts[1])
    lone = tmp_path / parts[0].name
    lone.write_bytes(parts[0].read_bytes())
    with pytest.raises(ModelLoadError, match="split in 3 files; missing beside it: model-00002-of-00003.gguf, "
                                             "model-00003-of-00003.gguf"):
        GGUFFile(lone)


def test_a_renamed_first_part_is_named_as_the_first(files, tmp_path):
    """It was "file 1 of a model split in 3: give the first", about the first file."""
    _, parts = files
    renamed = tmp_path / "model.gguf"
    renamed.write_bytes(parts[0].read_bytes())
    with pytest.raises(ModelLoadError, match="the first file of a model split in 3, renamed: the others are found by "
                                             "its name, which must be NAME-00001-of-00003.gguf"):
        GGUFFile(renamed)
