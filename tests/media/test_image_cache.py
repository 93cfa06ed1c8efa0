"""prepare_image keeps recent results: the same bytes and config again are not decoded again (a chat's image at
every turn), another config or other bytes are; the cache is bounded by the pixels' bytes, oldest out first."""

from __future__ import annotations

import io
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from hearth.media import images
from hearth.media.config import read_vision_config
from hearth.media.image_cache import PreparedCache
from tests.mmproj_factory import tiny_hf, write_mmproj


def png(seed: int) -> bytes:
    arr = np.random.default_rng(seed).integers(0, 256, (30, 41, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(arr).save(out, "PNG")
    return out.getvalue()


@pytest.fixture
def decodes(monkeypatch):
    calls = []
    real = images.decode
    monkeypatch.setattr(images, "decode", lambda *a: calls.append(1) or real(*a))
    images.PREPARED.clear()
    yield calls
    images.PREPARED.clear()


def test_the_same_image_again_is_not_decoded_again(tmp_path, decodes):
    cfgs = []
    for name in ("gemma3", "mlp"):
        write_mmproj(tmp_path / f"{name}.gguf", name, tiny_hf(name))
        cfgs.append(read_vision_config(tmp_path / f"{name}.gguf"))
    gemma, mlp = cfgs
    first = images.prepare_image(png(0), gemma)
    again = images.prepare_image(png(0), gemma)
    assert len(decodes) == 1 and again is first
    other = images.prepare_image(png(0), mlp)  # another config: prepared for it
    assert len(decodes) == 2 and other.digests != first.digests
    images.prepare_image(png(1), gemma)  # other bytes
    assert len(decodes) == 3
    with pytest.raises(ValueError):
        images.prepare_image(b"not an image", gemma)
    with pytest.raises(ValueError):  # a refusal is not kept
        images.prepare_image(b"not an image", gemma)
    assert len(decodes) == 5


def test_the_cache_is_bounded_by_the_pixels_bytes():
    made = lambda n: SimpleNamespace(pixels=np.zeros(n, np.uint8))  # noqa: E731
    cache = PreparedCache(max_bytes=100)
    a = cache.get("a", lambda: made(40))
    cache.get("b", lambda: made(40))
    assert cache.get("a", lambda: made(40)) is a  # a used last: b goes first
    cache.get("c", lambda: made(40))
    assert len(cache) == 2 and cache.bytes == 80
    assert cache.get("a", lambda: made(40)) is a
    assert cache.get("b", lambda: made(1)).pixels.nbytes == 1  # made again
    cache.get("big", lambda: made(101))  # larger than the whole: not kept, nothing dropped for it
    assert "big" not in cache._items and cache.bytes <= 100
