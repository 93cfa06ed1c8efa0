"""Derived arrays kept on disk (hearth.loader.array_cache): computed once per key, read back after,
recomputed when the file is damaged or the directory cannot be written."""

from __future__ import annotations

import numpy as np

from hearth.loader.array_cache import cache_key, cached_array
from hearth.loader.gguf_loader import GGUFFile
from hearth.loader.spm_merges import spm_merges
from hearth.loader.vocab import read_vocab
from tests.gguf_factory import tiny_dir


def test_computed_once_then_read_back_and_damage_is_recomputed(tmp_path, monkeypatch):
    monkeypatch.setenv("HEARTH_HOME", str(tmp_path))
    calls = []

    def compute():
        calls.append(1)
        return np.arange(6, dtype=np.int64).reshape(2, 3)

    key = cache_key([b"tokens", b"scores"])
    assert key != cache_key([b"tokenss", b"cores"])  # parts are length-prefixed
    first = cached_array("demo", key, compute)
    again = cached_array("demo", key, compute)
    assert len(calls) == 1 and np.array_equal(first, again)
    (tmp_path / "cache" / "demo" / f"{key}.npy").write_bytes(b"\x93NUMPY garbage")
    assert np.array_equal(cached_array("demo", key, compute), first) and len(calls) == 2
    assert not list((tmp_path / "cache" / "demo").glob("*.tmp"))


def test_unwritable_home_still_computes(tmp_path, monkeypatch):
    home = tmp_path / "file-not-dir"
    home.write_text("")
    monkeypatch.setenv("HEARTH_HOME", str(home))
    assert np.array_equal(cached_array("demo", "k", lambda: np.ones(3)), np.ones(3))


def test_spm_merges_from_the_cache_equal_computed(tmp_path, monkeypatch):
    d, name, _ = tiny_dir(tmp_path, "gemma3")  # a SentencePiece vocabulary
    vocab = read_vocab(GGUFFile(d / name))
    monkeypatch.setenv("HEARTH_HOME", str(tmp_path / "a"))
    computed = spm_merges(vocab)
    assert computed and list((tmp_path / "a" / "cache" / "spm-merges").glob("*.npy"))
    assert spm_merges(vocab) == computed  # read back
