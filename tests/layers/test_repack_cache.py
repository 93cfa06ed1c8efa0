"""The on-disk cache of repacked weights (hearth.layers.repack_cache): a second load maps what the first
built, bit for bit; a changed GGUF, a damaged entry or HEARTH_REPACK_CACHE=0 repacks."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from hearth.layers import repack, repack_cache
from hearth.layers.linear import build_linear
from hearth.loader.gguf_loader import GGUFFile
from tests.layers.test_quant import random_tensor

NAMES = {"a.weight": Q.Q4_K, "b.weight": Q.Q6_K}  # an int4 part and a bf16 part


def _write(path, seed: int) -> None:
    w = gguf.GGUFWriter(str(path), "llama")
    rng = np.random.default_rng(seed)
    for name, qtype in NAMES.items():
        w.add_tensor(name, random_tensor(qtype, 96, 512, rng).data, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


BUILT: list[str] = []


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HEARTH_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(repack_cache, "MIN_FILE_BYTES", 0)  # the test file is tiny
    monkeypatch.setattr(repack_cache, "_pruned", set())
    for fn in ("pack_int4", "dequantize"):  # the repackers: count the parts built instead of mapped
        monkeypatch.setattr(repack, fn, lambda *a, _f=getattr(repack, fn), _n=fn: BUILT.append(_n) or _f(*a))
    return tmp_path / "home" / "cache" / "repack"


def _outputs(path) -> tuple[list[torch.Tensor], list[bool]]:
    """Each linear's output on fixed activations, and whether its weight came from the cache's map."""
    g = GGUFFile(path)
    x = torch.randn(3, 512, generator=torch.Generator().manual_seed(0))
    ys, mapped = [], []
    for name in NAMES:
        BUILT.clear()
        ys.append(build_linear(g.tensor(name))(x))
        mapped.append(not BUILT)
    return ys, mapped


def test_second_load_maps_the_same_bits(home, tmp_path):
    path = tmp_path / "m.gguf"
    _write(path, 0)
    first, mapped = _outputs(path)
    assert mapped == [False, False]
    assert len(list(home.glob("*/*.npy"))) == 2
    again, mapped = _outputs(path)
    assert mapped == [True, True]
    assert all(torch.equal(a, b) for a, b in zip(first, again))


def test_changed_file_repacks_and_prunes_the_old_entries(home, tmp_path, monkeypatch):
    path = tmp_path / "m.gguf"
    _write(path, 0)
    first, _ = _outputs(path)
    old = {p.parent for p in home.glob("*/*.npy")}
    _write(path, 1)  # same name and size, new weights
    monkeypatch.setattr(repack_cache, "_pruned", set())  # a new process
    other, mapped = _outputs(path)
    assert mapped == [False, False]
    assert not any(torch.equal(a, b) for a, b in zip(first, other))
    assert old.isdisjoint(p.parent for p in home.glob("*/*.npy"))  # the replaced file's folder is gone


def test_damaged_entry_repacks(home, tmp_path):
    path = tmp_path / "m.gguf"
    _write(path, 0)
    first, _ = _outputs(path)
    for entry in home.glob("*/*.npy"):
        entry.write_bytes(entry.read_bytes()[:1000])
    again, mapped = _outputs(path)
    assert mapped == [False, False]
    assert all(torch.equal(a, b) for a, b in zip(first, again))


def test_switched_off(home, tmp_path, monkeypatch):
    monkeypatch.setenv("HEARTH_REPACK_CACHE", "0")
    path = tmp_path / "m.gguf"
    _write(path, 0)
    _outputs(path)
    assert not home.exists()
