"""Weights the C++ kernels stream, moved into 2 MB pages after the load (hearth.layers.huge_pages): the file's
bytes; the same tokens and log-probabilities from the mapping, from the copy and across the switch; the mapping
kept where switched off, short of memory, not a file, or where the read fails; the copies gone with their model."""

from __future__ import annotations

import gc
import os
import threading
import time

import numpy as np
import pytest
import torch

from hearth import LLM, SamplingParams
from hearth.backends.cpu_linear import NativePart
from hearth.kernels import native
from hearth.layers import huge_pages
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
    huge_pages.wait()
    huge_pages.mode.cache_clear()


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, "llama", qtype="Q8_0")
    return path


def _in_file(t: torch.Tensor, g: GGUFFile) -> bool:
    root = memmap_root(g.tensor("token_embd.weight").data)
    return root.ctypes.data <= t.data_ptr() < root.ctypes.data + root.nbytes


def _moved(g: GGUFFile, name: str) -> tuple[torch.Tensor, list[torch.Tensor]]:
    t = g.tensor(name)
    raw, got = as_bytes(t.data, t.qtype), []
    assert huge_pages.move(raw, t.data, got.append)
    huge_pages.wait()
    return raw, got


def test_a_tensor_moves_into_an_aligned_copy_of_its_bytes(thp, tiny):
    g = GGUFFile(tiny)
    raw, (got,) = _moved(g, "blk.0.ffn_up.weight")
    assert not _in_file(got, g) and got.data_ptr() % huge_pages.ALIGN == 0
    assert got.shape == raw.shape and torch.equal(got, raw)
    _, (second,) = _moved(g, "blk.0.ffn_down.weight")
    chunk = huge_pages._arenas[id(memmap_root(g.tensor("token_embd.weight").data))].chunk
    assert chunk.data_ptr() % huge_pages.HUGE == 0  # one 2 MB-aligned chunk holds both
    assert chunk.data_ptr() <= got.data_ptr() < second.data_ptr() < chunk.data_ptr() + chunk.numel()


def test_the_mapping_stays_where_off_short_of_memory_or_not_a_file(thp, tiny, monkeypatch):
    g = GGUFFile(tiny)
    t = g.tensor("blk.0.ffn_up.weight")
    raw, anonymous, got = as_bytes(t.data, t.qtype), np.array(t.data), []
    assert not huge_pages.move(as_bytes(anonymous, t.qtype), anonymous, got.append)

    monkeypatch.setattr(huge_pages, "mem_available", lambda: huge_pages.RESERVE)  # the file would leave < RESERVE
    assert not huge_pages.move(raw, t.data, got.append)
    huge_pages.wait()
    assert got == []

    thp.write_text("always madvise [never]\n")
    huge_pages.mode.cache_clear()
    assert huge_pages.mode() == f"the file mapping (transparent huge pages are `never`: {thp})"
    monkeypatch.setenv("HEARTH_HUGE_PAGES", "0")
    huge_pages.mode.cache_clear()
    assert huge_pages.mode() == "the file mapping (HEARTH_HUGE_PAGES=0)"


def test_a_switch_that_is_neither_0_nor_1_is_named_and_the_default_kept(thp, monkeypatch, caplog):
    monkeypatch.setenv("HEARTH_HUGE_PAGES", "off")
    huge_pages.mode.cache_clear()
    assert huge_pages.mode() == "2 MB pages"
    assert "HEARTH_HUGE_PAGES='off' is neither 0 (the file mapping) nor 1" in caplog.text


def test_a_models_arena_goes_with_its_file(thp, tiny):
    g = GGUFFile(tiny)
    key = id(memmap_root(g.tensor("token_embd.weight").data))
    got = _moved(g, "blk.0.ffn_up.weight")[1]
    assert key in huge_pages._arenas
    del g, got
    gc.collect()
    assert key not in huge_pages._arenas


@pytest.mark.skipif(not native.available(), reason="the C++ kernels do not run at the torch tier")
def test_a_model_answers_bit_for_bit_from_its_mapping_its_copy_and_across_the_switch(thp, tiny, monkeypatch):
    """The moves held back until a first answer is out, then let go while a second runs, then done: every
    answer equals the one the mapping alone gives. A read that fails leaves the mapping serving."""
    prompt = {"prompt_token_ids": [5, 9, 14, 3, 27, 8]}
    params = SamplingParams(temperature=0, max_tokens=12, logprobs=3, ignore_eos=True)

    def answer(llm):
        out = llm.generate(prompt, params)[0].outputs[0]
        return out.token_ids, [{k: v.logprob for k, v in lp.items()} for lp in out.logprobs]

    def in_file(llm) -> list[bool]:
        return [_in_file(r, llm.gguf) for m in llm.model.modules() if isinstance(m, NativePart) for r, _ in m.raws]

    monkeypatch.setenv("HEARTH_HUGE_PAGES", "0")
    huge_pages.mode.cache_clear()
    mapped = LLM(str(tiny), max_model_len=64, progress=False)
    expected = answer(mapped)
    assert in_file(mapped) and all(in_file(mapped))

    monkeypatch.setenv("HEARTH_HUGE_PAGES", "1")
    huge_pages.mode.cache_clear()
    go, read = threading.Event(), huge_pages._read
    monkeypatch.setattr(huge_pages, "_read", lambda *a: (go.wait(), read(*a)))
    llm = LLM(str(tiny), max_model_len=64, progress=False)
    assert all(in_file(llm)) and answer(llm) == expected
    go.set()
    assert answer(llm) == expected
    huge_pages.wait()
    assert not any(in_file(llm)) and answer(llm) == expected

    def fail(*a):
        raise OSError("the disk went away")
    monkeypatch.setattr(huge_pages, "_read", fail)
    llm = LLM(str(tiny), max_model_len=64, progress=False)
    huge_pages.wait()
    assert all(in_file(llm)) and answer(llm) == expected


def test_a_child_forked_during_the_moves_waits_for_nothing(thp, tiny, monkeypatch):
    g = GGUFFile(tiny)
    t = g.tensor("blk.0.ffn_up.weight")
    go, read, got = threading.Event(), huge_pages._read, []
    monkeypatch.setattr(huge_pages, "_read", lambda *a: (go.wait(), read(*a)))
    assert huge_pages.move(as_bytes(t.data, t.qtype), t.data, got.append)
    pid = os.fork()
    if pid == 0:  # the child: no worker, and wait() must not hang on the parent's queue
        huge_pages.wait()
        os._exit(0 if got == [] else 1)
    go.set()
    for _ in range(300):  # 30 s, then the child hangs: kill it
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the forked child's wait() hung on its parent's moves")
    huge_pages.wait()
    assert os.waitstatus_to_exitcode(status) == 0 and len(got) == 1


def test_memory_available_is_a_containers_where_its_cgroup_allows_less(tmp_path, monkeypatch):
    limit, stat = tmp_path / "memory.max", tmp_path / "memory.stat"
    monkeypatch.setattr(huge_pages, "CGROUP_MAX", limit)
    monkeypatch.setattr(huge_pages, "CGROUP_STAT", stat)
    host = huge_pages.mem_available()  # neither file: the host's MemAvailable
    stat.write_text(f"anon {3 << 29}\nfile {5 << 30}\n")
    limit.write_text(f"{2 << 30}\n")
    assert huge_pages.mem_available() == min(host, (2 << 30) - (3 << 29))  # its page cache counts as available
    limit.write_text("max\n")
    assert abs(huge_pages.mem_available() - host) < 1 << 28
