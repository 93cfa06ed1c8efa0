"""Qwen2-VL's and Qwen2.5-VL's vision tower + merger (hearth.models.qwen_vision) on tiny random mmproj files
(tests/mmproj_qwen.py) against transformers' get_image_features on the same weights and pixels: square, wide,
tall and tiny images; for 2.5 an 11 x 7 grid, whose 4 x 4-unit windows are cut short on the right and at the
bottom. The index math alone against transformers' (positions, window index). test_each_feature_is_seen breaks
one thing at a time on that grid (max error relative to the largest value; the main test's tolerance is 1e-5):
windows not reordered 0.22, windows of 2 x 2 units 0.26, every block whole 0.28, no block whole 0.17, rows and
columns swapped in the rotary 0.05, no rotary 0.06. Broken by hand once: the rows not put back in the processor's
order 0.66, the angles not reordered with them 0.16, rotate_half's sign 0.07-0.18, the merger's gelu as tanh
1-3e-5, LayerNorm as RMSNorm 0.5-0.65, 2.5's gate and up exchanged 0.33. The two temporal patch slices exchanged
go unseen, rightly: a still image's two frames are equal."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image
from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLVisionRotaryEmbedding
from transformers.vision_utils import get_vision_position_ids, get_vision_window_index

from hearth.backends import select
from hearth.layers.linear import use_linear_policy
from hearth.media.images import prepare_image
from hearth.models import qwen_vision
from hearth.models.qwen_vision_grid import rope_angles, windows
from hearth.models.vision import VisionEncoder
from tests.mmproj_factory import hf_features, tiny_hf
from tests.mmproj_qwen import QWEN, write_mmproj

REL_TOL = 1e-5  # max |hearth - transformers| relative to the largest |value|, f32 math on the file's weights
REL_TOL_FAST = 3e-2  # F16 weights / Q8_0 blocks and the fast paths' bf16 activations
SIZES = [(71, 45), (30, 97), (5, 3), (196, 308)]  # grids 3 x 4, 6 x 2, 3 x 4 (min_pixels), 11 x 7
PARTIAL = (196, 308)


@pytest.fixture(scope="module")
def models():
    return {name: tiny_hf(name) for name in QWEN}


def png(w: int, h: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(w).integers(0, 256, (h, w, 3), dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).abs().max() / want.abs().max())


def encoder(tmp_path, models, name: str, qtype: str = "F32") -> VisionEncoder:
    path = tmp_path / f"{name}-{qtype}.gguf"
    write_mmproj(path, name, models[name], qtype=qtype)
    with use_linear_policy(exact=qtype == "F32"):
        return VisionEncoder.load(path, select())


def rows(enc: VisionEncoder, models, size) -> tuple[torch.Tensor, torch.Tensor]:
    """(hearth's rows, transformers' rows) for an image of `size`."""
    (pixels,) = prepare_image(png(*size), enc.cfg).pixels
    return enc.encode(pixels), hf_features(enc.cfg.projector, models[enc.cfg.projector], pixels)


@pytest.mark.parametrize("name", QWEN)
def test_rows_equal_transformers(tmp_path, models, name):
    enc = encoder(tmp_path, models, name)
    for size in SIZES:
        got, want = rows(enc, models, size)
        grid = prepare_image(png(*size), enc.cfg).grid
        assert got.dtype == torch.float32 and got.shape == want.shape == (grid[0] * grid[1], enc.cfg.lm_hidden)
        assert rel_err(got, want) < REL_TOL, size


@pytest.mark.parametrize("qtype", ["F16", "Q8_0"])
@pytest.mark.parametrize("name", QWEN)
def test_half_and_q8_0_files(tmp_path, models, name, qtype):
    got, want = rows(encoder(tmp_path, models, name, qtype), models, PARTIAL)
    assert rel_err(got, want) < REL_TOL_FAST


def test_file_layout_as_llama_cpps_converter(tmp_path, models):
    """The patch embedding's two temporal slices (the second always F32), q/k/v apart, the MLP's width from its
    tensors (Qwen2-VL's feed_forward_length is the LM's width), 2.5's full-attention spacing."""
    enc = encoder(tmp_path, models, "qwen2vl_merger", "F16")
    assert enc.cfg.ffn == 48 and enc.tower.blocks[0].up.in_features == 32 and enc.tower.patch.shape == (1176, 32)
    assert enc.tower.whole == [True, True]
    enc = encoder(tmp_path, models, "qwen2.5vl_merger")
    assert (enc.cfg.activation, enc.cfg.wa_pattern, enc.cfg.window) == ("silu", 2, 112)
    assert enc.tower.whole == [False, True, False, True] and enc.tower.window == 4 and enc.tower.blocks[0].gated


@pytest.mark.parametrize("grid", [(3, 4), (11, 7), (8, 8), (1, 9), (5, 1)])
def test_index_math_equals_transformers(grid):
    rows_, cols = grid
    thw = torch.tensor([[1, rows_ * 2, cols * 2]])
    order, sizes = windows(rows_, cols, 4)
    want_order, cu = get_vision_window_index(thw, spatial_merge_size=2, window_size=112, patch_size=14)
    assert order.tolist() == want_order.tolist()
    assert [0, *np.cumsum(sizes) * 4] == cu.tolist()
    rope = Qwen2VLVisionRotaryEmbedding(tiny_hf("qwen2vl_merger").config.vision_config)
    want_cos, want_sin = rope(torch.zeros(1), get_vision_position_ids(thw, 2))
    cos, sin = rope_angles(rows_, cols, 2, 16)
    torch.testing.assert_close((cos, sin), (want_cos, want_sin), rtol=0, atol=0)


def _no_reorder(rows_, cols, side):
    order, sizes = windows(rows_, cols, side)
    return torch.arange(len(order)), sizes  # the windows' sizes, over units in row-major order


def _swapped(rows_, cols, merge, d):
    """Each patch's angles at (w, h) in place of (h, w): the halves of each half exchanged."""
    return tuple(t.view(-1, 4, d // 4)[:, [1, 0, 3, 2]].reshape(-1, d) for t in rope_angles(rows_, cols, merge, d))


BREAKS = {  # what is broken -> (projector, how)
    "windows not reordered": ("qwen2.5vl_merger", lambda mp, enc: mp.setattr(qwen_vision, "windows", _no_reorder)),
    "windows of 2 x 2 units": ("qwen2.5vl_merger", lambda mp, enc: mp.setattr(enc.tower, "window", 2)),
    "every block whole": ("qwen2.5vl_merger", lambda mp, enc: mp.setattr(enc.tower, "whole", [True] * 4)),
    "no block whole": ("qwen2.5vl_merger", lambda mp, enc: mp.setattr(enc.tower, "whole", [False] * 4)),
    "rows and columns swapped": ("qwen2vl_merger", lambda mp, enc: mp.setattr(qwen_vision, "rope_angles", _swapped)),
    "no rotary": ("qwen2vl_merger", lambda mp, enc: mp.setattr(
        qwen_vision, "rope_angles", lambda r, c, m, d: (torch.ones(r * c * m * m, d), torch.zeros(r * c * m * m, d)))),
}


@pytest.mark.parametrize("broken", BREAKS)
def test_each_feature_is_seen(tmp_path, models, monkeypatch, broken):
    name, breaking = BREAKS[broken]
    enc = encoder(tmp_path, models, name)
    breaking(monkeypatch, enc)
    got, want = rows(enc, models, PARTIAL)
    assert rel_err(got, want) > 1e-3


def test_wrong_pixels_are_refused(tmp_path, models):
    enc = encoder(tmp_path, models, "qwen2vl_merger")
    with pytest.raises(ValueError, match=r"pixels of shape \(3, 56, 56\); this encoder reads \[rows, cols, 4, 1176\]"):
        enc.encode(np.zeros((3, 56, 56), np.float32))
