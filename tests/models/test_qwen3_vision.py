"""Qwen3-VL's vision tower + mergers (hearth.models.qwen_vision, hearth.models.qwen_deepstack) on a tiny random
mmproj (tests/mmproj_qwen3.py) against transformers' get_image_features on the same weights and pixels: its
pooler_output and each of its deepstack_features, side by side as llama.cpp's rows [main | ds 1 | ds 2]; images
whose patch grid is the position table's own (6 x 6), wider, taller, tiny and larger than it. The learned
positions' resampling alone against transformers' taps and weights, to the bit. test_each_feature_is_seen breaks
one thing at a time on a 10 x 6 grid (max error of the worst part relative to its largest value; the main test's
tolerance is 1e-5): no learned positions 0.09, positions resampled with the corners not aligned 0.05, no
patch bias 0.22, deepstack from blocks 1 and 2 in place of 0 and 2 0.43, the deepstack mergers exchanged 1.8, no
rotary 0.17. Measured by hand once: every merger's gelu in its tanh form (llama.cpp's ggml_gelu) 2e-4."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from transformers.vision_utils import get_vision_interpolation_indices_and_weights

from hearth.backends import select
from hearth.errors import ModelLoadError
from hearth.layers.linear import use_linear_policy
from hearth.media.config import read_vision_config
from hearth.media.images import prepare_image
from hearth.models import qwen_vision
from hearth.models.qwen_vision_grid import learned_positions
from hearth.models.vision import VisionEncoder
from tests import mmproj_qwen3
from tests.mmproj_factory import hf_features, tiny_hf
from tests.mmproj_qwen3 import DEEPSTACK, NAME, write_mmproj

REL_TOL = 1e-5  # max |hearth - transformers| relative to the largest |value| of each part, f32 math
REL_TOL_FAST = 3e-2  # F16 weights / Q8_0 blocks and the fast paths' bf16 activations
SIZES = [(96, 96), (71, 45), (30, 97), (5, 3), (196, 308)]
"""Grids 3 x 3 (the table's own 6 x 6 patches), 3 x 4, 6 x 2, 3 x 4 (min_pixels), 10 x 6."""
LARGE = (196, 308)


@pytest.fixture(scope="module")
def model():
    return tiny_hf(NAME)


def png(w: int, h: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(w).integers(0, 256, (h, w, 3), dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def worst(got: torch.Tensor, want: torch.Tensor, lm_hidden: int) -> float:
    """The largest of each part's max |got - want| relative to its own largest |value|."""
    return max(float((g - w).abs().max() / w.abs().max())
               for g, w in zip(got.split(lm_hidden, dim=-1), want.split(lm_hidden, dim=-1)))


def encoder(tmp_path, model, qtype: str = "F32") -> VisionEncoder:
    path = tmp_path / f"q3-{qtype}.gguf"
    write_mmproj(path, model, qtype=qtype)
    with use_linear_policy(exact=qtype == "F32"):
        return VisionEncoder.load(path, select())


def rows(enc: VisionEncoder, model, size) -> tuple[torch.Tensor, torch.Tensor]:
    (pixels,) = prepare_image(png(*size), enc.cfg).pixels
    return enc.encode(pixels), hf_features(NAME, model, pixels)


def test_rows_equal_transformers(tmp_path, model):
    enc = encoder(tmp_path, model)
    width = enc.cfg.lm_hidden * 3
    for size in SIZES:
        got, want = rows(enc, model, size)
        grid = prepare_image(png(*size), enc.cfg).grid
        assert got.dtype == torch.float32 and got.shape == want.shape == (grid[0] * grid[1], width)
        assert worst(got, want, enc.cfg.lm_hidden) < REL_TOL, size


@pytest.mark.parametrize("qtype", ["F16", "Q8_0"])
def test_half_and_q8_0_files(tmp_path, model, qtype):
    enc = encoder(tmp_path, model, qtype)
    got, want = rows(enc, model, LARGE)
    assert worst(got, want, enc.cfg.lm_hidden) < REL_TOL_FAST


def test_file_layout_as_llama_cpps_converter(tmp_path, model):
    """qkv fused, the patch embedding's bias, the position table F32 and square, the deepstack blocks by index."""
    enc = encoder(tmp_path, model, "F16")
    cfg, tower = enc.cfg, enc.tower
    assert (cfg.deepstack, cfg.deepstack_layers, cfg.image_size, cfg.patch_size) == (2, tuple(DEEPSTACK), 96, 16)
    assert (cfg.mean, cfg.std, cfg.activation, cfg.min_pixels, cfg.max_pixels) == \
        ((0.5,) * 3, (0.5,) * 3, "gelu", 8 * 1024, 4096 * 1024)
    assert tower.positions.shape == (36, 32) and tower.patch_bias.shape == (32,) and tower.patch.shape == (1536, 32)
    assert tower.blocks[0].qkv.lin.out_features == 96 and tower.deepstack == set(DEEPSTACK)
    assert [d.norm.weight.shape for d in enc.projector.deepstack] == [(128,), (128,)]


@pytest.mark.parametrize("grid", [(6, 6), (3, 4), (11, 7), (1, 9), (5, 1), (1, 1), (20, 3)])
def test_learned_positions_equal_transformers(model, grid):
    """The table read at HF's four taps with its weights: the same values to the bit, in merge-unit order."""
    table = model.model.visual.pos_embed.weight.detach()
    thw = torch.tensor([[1, grid[0] * 2, grid[1] * 2]])
    idx, weights = get_vision_interpolation_indices_and_weights(thw, 6, mode="bilinear", align_corners=True,
                                                                spatial_merge_size=2)
    want = (F.embedding(idx, table) * weights[:, :, None]).sum(1)
    torch.testing.assert_close(learned_positions(table, *grid, 2), want, rtol=0, atol=0)


def _unaligned(table, rows_, cols, merge):
    """F.interpolate without align_corners (half-pixel centres), then merge-unit order."""
    d, side = table.shape[1], round(table.shape[0] ** 0.5)
    x = F.interpolate(table.T.reshape(1, d, side, side), size=(rows_ * merge, cols * merge), mode="bilinear")[0]
    return x.reshape(d, rows_, merge, cols, merge).permute(1, 3, 2, 4, 0).reshape(-1, d)


BREAKS = {  # what is broken -> how
    "no learned positions": lambda mp, enc: mp.setattr(enc.tower, "positions", None),
    "positions with the corners not aligned": lambda mp, enc: mp.setattr(qwen_vision, "learned_positions", _unaligned),
    "no patch bias": lambda mp, enc: mp.setattr(enc.tower, "patch_bias", None),
    "deepstack from other blocks": lambda mp, enc: mp.setattr(enc.tower, "deepstack", {1, 2}),
    "deepstack mergers exchanged": lambda mp, enc: mp.setattr(enc.projector, "deepstack",
                                                              torch.nn.ModuleList(enc.projector.deepstack[::-1])),
    "no rotary": lambda mp, enc: mp.setattr(
        qwen_vision, "rope_angles", lambda r, c, m, d: (torch.ones(r * c * m * m, d), torch.zeros(r * c * m * m, d))),
}


@pytest.mark.parametrize("broken", BREAKS)
def test_each_feature_is_seen(tmp_path, model, monkeypatch, broken):
    enc = encoder(tmp_path, model)
    BREAKS[broken](monkeypatch, enc)
    got, want = rows(enc, model, LARGE)
    assert worst(got, want, enc.cfg.lm_hidden) > 1e-3


def test_deepstack_blocks_from_the_tensors_without_the_key(tmp_path, model):
    """llama.cpp finds the deepstack blocks by their v.deepstack.{i} tensors: a file without the key reads the same."""
    write_mmproj(tmp_path / "q.gguf", model, deepstack_key=False)
    cfg = read_vision_config(tmp_path / "q.gguf")
    assert (cfg.deepstack, cfg.deepstack_layers) == (2, tuple(DEEPSTACK))


def test_deepstack_key_and_tensors_must_agree(tmp_path):
    """A file whose is_deepstack_layers marks blocks it has no mergers for is refused in one line at load."""
    write_mmproj(tmp_path / "q.gguf", tiny_hf(NAME, deepstack_visual_indexes=[1]))
    broken = tiny_hf(NAME)
    broken.config.vision_config.deepstack_visual_indexes = [0, 1]  # the key says 0, 1; the tensors 0, 2
    write_mmproj(tmp_path / "bad.gguf", broken)
    assert read_vision_config(tmp_path / "q.gguf").deepstack_layers == (1,)
    with pytest.raises(ModelLoadError, match=r"is_deepstack_layers \[True, True, False\] does not name the blocks "
                                             r"it has v.deepstack tensors for \[0, 2\]"):
        read_vision_config(tmp_path / "bad.gguf")


@pytest.mark.parametrize("table", ["none", "not square"])
def test_a_missing_or_odd_position_table_is_refused(tmp_path, model, monkeypatch, table):
    tensors = mmproj_qwen3._tensors

    def changed(m):
        for name, value in tensors(m):
            if name != "v.position_embd.weight":
                yield name, value
            elif table == "not square":
                yield name, value[:35]

    monkeypatch.setattr(mmproj_qwen3, "_tensors", changed)
    write_mmproj(tmp_path / "q.gguf", model)
    shape = "none" if table == "none" else r"\(35, 32\)"
    with pytest.raises(ModelLoadError, match=rf"v.position_embd.weight is {shape}: qwen3vl_merger needs a square "
                                             r"grid of positions of width 32"):
        VisionEncoder.load(tmp_path / "q.gguf", select())
