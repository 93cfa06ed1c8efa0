"""VisionEncoder on tiny random mmproj files (tests/mmproj_factory.py) against transformers' own
get_image_features on the same weights and the same pixels: LLaVA-1.5 (mlp), Gemma 3, Idefics3/SmolVLM, Qwen-VL,
Gemma 4 (tests/models/test_gemma4_vision.py has its own).
Each feature was broken once by hand to see the test catch it (max error relative to the largest value;
REL_TOL is 1e-5): the feature layer one block short 0.74, no pre-LayerNorm 0.47, quick_gelu as gelu 6e-3,
the projector's erf gelu as tanh 1.3e-4, no post-LayerNorm 0.87 (gemma3) / 1.3 (idefics3), the soft norm
without its +1 0.5, no soft norm 0.29, a plain reshape for the pixel shuffle 0.37, no patch bias 0.10; the
class row kept or no pooling: the wrong row count; fc1/fc2 not swapped back: the matmul refuses."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

from hearth.backends import select
from hearth.errors import ModelLoadError
from hearth.layers.linear import use_linear_policy
from hearth.media.images import prepare_image
from hearth.media.projectors import PROJECTORS
from hearth.models.vision import VisionEncoder
from tests.mmproj_factory import hf_features, hf_processor, tiny_hf, write_mmproj, write_settings_only

REL_TOL = 1e-5  # max |hearth - transformers| relative to the largest |value|, f32 math on the file's weights
REL_TOL_FAST = 3e-2  # the fast linear paths round activations (and F16 weights) to bf16; Q8_0 its blocks
LOOSER = {"gemma4v-q8_0": 0.1}
"""Gemma 4's tower (scale-1 attention over RMS-normed q and k, norms after each part) carries Q8_0's rounding
further: measured 0.039 and 0.046 (two seeds) with f32 math on the Q8_0 weights, 0.06 on the fast path."""
CASES = {  # case -> (projector, matrix type, feature_layer key written, model settings)
    **{name: (name, "F32", False, {}) for name in PROJECTORS},
    "mlp-feature-key": ("mlp", "F32", True, {}),
    "mlp-two-feature-layers": ("mlp", "F32", True, {"vision_feature_layer": [-3, -2]}),  # concatenated (granite's way)
    "gemma3-default-pool": ("gemma3", "F32", False, {"mm_tokens_per_image": 4}),  # k = 4: no scale_factor key
    "idefics3-scale-4": ("idefics3", "F32", False, {"scale_factor": 4}),  # SmolVLM's
    **{f"{name}-f16": (name, "F16", False, {}) for name in PROJECTORS},
    **{f"{name}-q8_0": (name, "Q8_0", False, {}) for name in PROJECTORS},
}


@pytest.fixture(scope="module")
def models():
    """(projector, settings) -> its tiny transformers model, built once."""
    built = {}

    def get(name: str, **config):
        key = (name, repr(sorted(config.items())))
        if key not in built:
            built[key] = tiny_hf(name, **config)
        return built[key]

    return get


@pytest.fixture(scope="module")
def image() -> bytes:
    rng = np.random.default_rng(7)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (45, 71, 3), dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).abs().max() / want.abs().max())


@pytest.mark.parametrize("case", CASES)
def test_rows_equal_transformers(tmp_path, models, image, case):
    name, qtype, feature_key, config = CASES[case]
    model = models(name, **config)
    path = tmp_path / "mmproj.gguf"
    write_mmproj(path, name, model, qtype=qtype, feature_key=feature_key)
    exact = qtype == "F32"
    with use_linear_policy(exact=exact):
        enc = VisionEncoder.load(path, select())
    prepared = prepare_image(image, enc.cfg)
    got = enc.encode(prepared.pixels[-1])  # the global image (idefics3's last piece)
    want = hf_features(name, model, prepared.pixels[-1])
    width = enc.cfg.lm_hidden * (1 + enc.cfg.deepstack)  # Qwen3-VL's: the deepstack parts beside the main rows
    assert got.dtype == torch.float32 and got.shape == want.shape == (prepared.num_embeds, width)
    assert rel_err(got, want) < (REL_TOL if exact else LOOSER.get(case, REL_TOL_FAST))


@pytest.mark.parametrize("size", [(71, 45), (30, 97), (20, 20)])
def test_idefics3_tiles_equal_transformers_over_its_processors_pixels(tmp_path, models, size):
    """Each tile's rows (and the global image's) = Idefics3Model.get_image_features over all the pixel_values
    its processor makes by default (image splitting), in the same order: one MediaInput's rows each."""
    model = models("idefics3")
    path = tmp_path / "mmproj.gguf"
    write_mmproj(path, "idefics3", model)
    with use_linear_policy(exact=True):
        enc = VisionEncoder.load(path, select())
    img = Image.fromarray(np.random.default_rng(size[0]).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))
    buf = io.BytesIO()
    img.save(buf, "PNG")
    prepared = prepare_image(buf.getvalue(), enc.cfg)
    pixel_values = hf_processor("idefics3")(images=img, return_tensors="pt")["pixel_values"]  # [1, pieces, 3, S, S]
    with torch.no_grad():
        want = model.model.get_image_features(pixel_values=pixel_values).pooler_output[0]  # [pieces * rows, hidden]
    got = torch.cat([enc.encode(p) for p in prepared.pixels])
    assert len(prepared.pixels) > 1 and got.shape == want.shape == (len(prepared.befores) * 16, enc.cfg.lm_hidden)
    assert rel_err(got, want) < REL_TOL


def test_the_legacy_llava_file_runs_every_block_it_holds(tmp_path, models, image):
    """The file already dropped the block past LLaVA's feature layer -2 (llama.cpp's graph drops one more:
    ggml-org/llama.cpp#25817): the rows are HF's hidden_states[-2], not [-3]."""
    path = tmp_path / "mmproj.gguf"
    model = models("mlp")
    write_mmproj(path, "mlp", model)
    with use_linear_policy(exact=True):
        enc = VisionEncoder.load(path, select())
    (pixels,) = prepare_image(image, enc.cfg).pixels
    model.config.vision_feature_layer = -3
    try:
        one_short = hf_features("mlp", model, pixels)
    finally:
        model.config.vision_feature_layer = -2
    assert len(enc.tower.blocks) == 2 and rel_err(enc.encode(pixels), one_short) > 1e-2


def test_wrong_pixels_and_wrong_files_are_refused(tmp_path, models):
    path = tmp_path / "mmproj.gguf"
    write_mmproj(path, "idefics3", models("idefics3"))
    enc = VisionEncoder.load(path, select())
    with pytest.raises(ValueError, match=r"pixels of shape \(3, 32, 32\); this encoder reads \[3, 64, 64\]"):
        enc.encode(np.zeros((3, 32, 32), np.float32))
    not_mmproj = tmp_path / "lm.gguf"
    write_settings_only(not_mmproj, None, {"token_embd.weight": np.zeros((4, 8), np.float32)},
                        arch="llama", vision=False)
    with pytest.raises(ModelLoadError, match="not an mmproj file"):
        VisionEncoder.load(not_mmproj, select())


def test_feature_layers_must_fit_the_projector(tmp_path, models):
    """Two feature layers named where mm.0 reads one layer's width: refused at load, not at the first image."""
    path = tmp_path / "mmproj.gguf"
    write_mmproj(path, "mlp", models("mlp"), feature_layers=[1, 2])
    with pytest.raises(ModelLoadError, match=r"mm.0 reads rows of width 32, but 2 feature layer\(s\) of width 32 "
                                             r"make 64"):
        VisionEncoder.load(path, select())
