"""Gemma 4's vision tower + embedder (hearth.models.gemma4_vision, llama.cpp's gemma4v) on a tiny random mmproj
(tests/mmproj_gemma4.py) against transformers' Gemma4VisionModel + Gemma4MultimodalEmbedder on the same weights and
pixels: square, wide and tall patch grids, with and without the clamped linears and the standardization; F16
weights on the fast path within a looser bound; the config the file gives. test_each_feature_is_seen breaks one
thing at a time and checks that the rows then differ from transformers' by far more than the tolerance."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

from hearth.backends import select
from hearth.layers.linear import use_linear_policy
from hearth.errors import UnsupportedError
from hearth.media.config import check_lm_hidden, read_vision_config
from hearth.media.images import prepare_image
from hearth.models import gemma4_vision
from hearth.models.vision import VisionEncoder
from tests import mmproj_gemma4

REL_TOL = 1e-5  # max |hearth - transformers| relative to the largest |value|, f32 math
REL_TOL_FAST = 3e-2  # F16 weights and the fast path's bf16 activations
SIZES = [(48, 48), (96, 144), (240, 96)]
"""Patch grids 3 x 3 (one pooled row), 6 x 9 and 15 x 6 (the table holds 64)."""


def pixels(h: int, w: int) -> np.ndarray:
    return np.random.default_rng(h * 1000 + w).random((3, h, w), dtype=np.float32)


def rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).abs().max() / want.abs().max())


def encoder(tmp_path, model, qtype: str = "F32") -> VisionEncoder:
    path = tmp_path / f"g4-{qtype}.gguf"
    mmproj_gemma4.write_mmproj(path, model, qtype=qtype)
    with use_linear_policy(exact=qtype == "F32"):
        return VisionEncoder.load(path, select())


@pytest.mark.parametrize("clamps,standardize", [(False, False), (True, True)])
def test_rows_equal_transformers(tmp_path, clamps, standardize):
    model = mmproj_gemma4.tiny_hf(clamps=clamps, standardize=standardize)
    enc = encoder(tmp_path, model)
    for h, w in SIZES:
        x = pixels(h, w)
        got, want = enc.encode(x), model.features(x)
        assert got.dtype == torch.float32 and got.shape == want.shape == (h * w // 48 ** 2, 48)
        assert rel(got, want) < REL_TOL, (h, w)


def test_f16_weights_on_the_fast_path(tmp_path):
    model = mmproj_gemma4.tiny_hf(clamps=True)
    enc = encoder(tmp_path, model, "F16")
    x = pixels(96, 144)
    assert rel(enc.encode(x), model.features(x)) < REL_TOL_FAST


def test_the_config_the_file_gives(tmp_path):
    path = tmp_path / "g4.gguf"
    mmproj_gemma4.write_mmproj(path, mmproj_gemma4.tiny_hf())
    cfg = read_vision_config(path)
    assert (cfg.projector, cfg.patch_size, cfg.merge, cfg.hidden, cfg.heads, cfg.layers, cfg.lm_hidden) == \
        ("gemma4v", 16, 3, 32, 2, 2, 48)
    # llama.cpp's set_limit_image_tokens(70, 1120) in rows of 48 x 48 pixels
    assert (cfg.min_pixels, cfg.max_pixels) == (70 * 48 ** 2, 1120 * 48 ** 2)
    assert cfg.spec.before == "<|image>" and cfg.spec.after == "<image|>" and cfg.spec.placeholder == "<|image|>"


def test_pixels_of_another_shape_are_refused(tmp_path):
    enc = encoder(tmp_path, mmproj_gemma4.tiny_hf())
    for shape in [(3, 50, 48), (3, 48 * 22, 48), (1, 48, 48), (48, 48)]:
        with pytest.raises(ValueError, match="reads \\[3, H, W\\]"):
            enc.encode(np.zeros(shape, np.float32))


def _unscaled(enc):
    forward = enc.tower.forward
    enc.tower.forward = lambda x: forward((x + 1) / 2)  # pixels left in [0, 1]


def _unclamped(enc):
    for mod in enc.modules():
        if isinstance(mod, gemma4_vision.Clipped):
            mod.bounds = [None] * 4


BREAKS = {  # measured once: 0.37, 0.38, 0.29, 1.25, and the rope's theta
    "no [-1, 1] scaling": _unscaled,
    "no clamps": _unclamped,
    "no standardization": lambda enc: setattr(enc.projector, "std_bias", None),
    "x and y tables exchanged": lambda enc: setattr(enc.tower, "pos_x", enc.tower.pos_y),
    "rope theta 10000": lambda enc: setattr(gemma4_vision, "ROPE_THETA", 10000.0),
}


@pytest.mark.parametrize("name", BREAKS)
def test_each_feature_is_seen(tmp_path, monkeypatch, name):
    model = mmproj_gemma4.tiny_hf(clamps=True, standardize=True)
    enc = encoder(tmp_path, model)
    x = pixels(96, 144)
    monkeypatch.setattr(gemma4_vision, "ROPE_THETA", gemma4_vision.ROPE_THETA)  # restored after the test
    BREAKS[name](enc)
    assert rel(enc.encode(x), model.features(x)) > 1000 * REL_TOL


@pytest.mark.parametrize("w,h", [(71, 45), (3000, 120), (1000, 600), (4032, 3024), (24 * 41, 24 * 3)])
def test_images_are_sized_as_llama_cpp_sizes_them(tmp_path, w, h):
    """llama.cpp's dyn_size resize (tests.mmproj_gemma4.llamacpp_size, from clip.cpp): 70..1120 rows; a side at an
    odd multiple of 24 px rounds up (std::round), not to even as HF's Qwen processor rounds."""
    path = tmp_path / "g4.gguf"
    mmproj_gemma4.write_mmproj(path, mmproj_gemma4.tiny_hf())
    cfg = read_vision_config(path)
    buf = io.BytesIO()
    Image.new("RGB", (w, h), (90, 20, 200)).save(buf, "PNG")
    image = prepare_image(buf.getvalue(), cfg)
    (piece,) = image.pixels
    want_h, want_w = mmproj_gemma4.llamacpp_size(h, w)
    assert piece.shape == (3, want_h, want_w) and image.num_embeds == want_h * want_w // 48 ** 2
    assert 70 <= image.num_embeds <= 1120 and image.befores == ("<|image>",)


def test_a_model_whose_images_attend_both_ways_is_refused(tmp_path):
    """llama.cpp runs images causally on E2B / E4B (widths 1536, 2560) only; the 31B and 26B-A4B attend both ways
    within an image on their sliding layers (transformers' use_bidirectional_attention "vision"): refused by name."""
    for width, refused in ((1536, False), (2560, False), (5376, True), (2816, True)):
        path = tmp_path / f"g4-{width}.gguf"
        mmproj_gemma4.write_mmproj(path, mmproj_gemma4.tiny_hf(lm_hidden=width))
        cfg = read_vision_config(path)
        if refused:
            with pytest.raises(UnsupportedError, match="attention both ways .* 1536 or 2560"):
                check_lm_hidden(cfg, width)
        else:
            check_lm_hidden(cfg, width)
