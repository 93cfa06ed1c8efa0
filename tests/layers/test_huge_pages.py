"""Weights the C++ kernels stream, read into 2 MB pages (hearth.layers.huge_pages): the file's bytes, the same
tokens and log-probabilities as from the mapping, the mapping itself where switched off, short of memory or not a
file, and gone with their model."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

from hearth import LLM, SamplingParams
from hearth.backends.cpu_linear import NativePart
from hearth.kernels import native
from hearth.layers import huge_pages
from hearth.layers.huge_pages import in_huge_pages
from hearth.layers.quant import as_bytes
from hearth.layers.residency import memmap_root
from hearth.loader.gguf_loader import GGUFFile
from tests.gguf_factory import write_tiny_gguf


@pytest.fixture
def thp(monkeypatch, tmp_path):
    """huge_pages.mode() as on a kernel with transparent huge pages in `madvise` mode, whatever this machine's."""
    enabled = tmp_path / "enabled"
    enabled.write_text("always [madvise] never\n")
    monkeypatch.setattr(huge_pages, "THP_MODE", enabled)
    monkeypatch.delenv("HEARTH_HUGE_PAGES", raising=False)
    huge_pages.mode.cache_clear()
    yield enabled
    huge_pages.mode.cache_clear()


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, "llama", qtype="Q8_0")
    return path


def _in_file(t: torch.Tensor, g: GGUFFile) -> bool:
    root = memmap_root(g.tensor("token_embd.weight").data)
    return root.ctypes.data <= t.data_ptr() < root.ctypes.data + root.nbytes


def test_a_tensor_is_read_into_an_aligned_copy_of_its_bytes(thp, tiny):
    g = GGUFFile(tiny)
    t = g.tensor("blk.0.ffn_up.weight")
    raw = as_bytes(t.data, t.qtype)
    got = in_huge_pages(raw, t.data)
    assert not _in_file(got, g) and got.data_ptr() % huge_pages.ALIGN == 0
    assert got.shape == raw.shape and torch.equal(got, raw)
    down = g.tensor("blk.0.ffn_down.weight")
    second = in_huge_pages(as_bytes(down.data, down.qtype), down.data)
    chunk = huge_pages._arenas[id(memmap_root(t.data))].chunk
    assert chunk.data_ptr() % huge_pages.HUGE == 0  # one 2 MB-aligned chunk holds both
    assert chunk.data_ptr() <= got.data_ptr() < second.data_ptr() < chunk.data_ptr() + chunk.numel()


def test_the_mapping_is_used_in_place_when_off_short_of_memory_or_not_a_file(thp, tiny, monkeypatch):
    g = GGUFFile(tiny)
    t = g.tensor("blk.0.ffn_up.weight")
    raw = as_bytes(t.data, t.qtype)
    anonymous = np.array(t.data)
    assert in_huge_pages(as_bytes(anonymous, t.qtype), anonymous).data_ptr() == anonymous.ctypes.data

    monkeypatch.setattr(huge_pages, "mem_available", lambda: huge_pages.RESERVE)  # the file would leave < RESERVE
    assert in_huge_pages(raw, t.data) is raw

    thp.write_text("always madvise [never]\n")
    huge_pages.mode.cache_clear()
    assert huge_pages.mode() == f"the file mapping (transparent huge pages are `never`: {thp})"
    monkeypatch.setenv("HEARTH_HUGE_PAGES", "0")
    huge_pages.mode.cache_clear()
    assert huge_pages.mode() == "the file mapping (HEARTH_HUGE_PAGES=0)"
    monkeypatch.undo()
    huge_pages.mode.cache_clear()


def test_a_models_arena_goes_with_its_file(thp, tiny):
    g = GGUFFile(tiny)
    t = g.tensor("blk.0.ffn_up.weight")
    key = id(memmap_root(t.data))
    got = in_huge_pages(as_bytes(t.data, t.qtype), t.data)
    assert key in huge_pages._arenas
    del g, t, got
    gc.collect()
    assert key not in huge_pages._arenas


@pytest.mark.skipif(not native.available(), reason="the C++ kernels do not run at the torch tier")
def test_a_model_in_huge_pages_answers_bit_for_bit_as_from_its_mapping(thp, tiny, monkeypatch):
    prompt = {"prompt_token_ids": [5, 9, 14, 3, 27, 8]}
    params = SamplingParams(temperature=0, max_tokens=8, logprobs=3, ignore_eos=True)

    def run(copy: bool):
        monkeypatch.setenv("HEARTH_HUGE_PAGES", "1" if copy else "0")
        huge_pages.mode.cache_clear()
        llm = LLM(str(tiny), max_model_len=64, progress=False)
        in_file = [_in_file(r, llm.gguf) for m in llm.model.modules() if isinstance(m, NativePart) for r, _ in m.raws]
        assert in_file
        out = llm.generate(prompt, params)[0].outputs[0]
        return in_file, out.token_ids, [{k: v.logprob for k, v in lp.items()} for lp in out.logprobs]

    mapped, copied = run(False), run(True)
    assert all(mapped[0]) and not any(copied[0])
    assert copied[1:] == mapped[1:]
