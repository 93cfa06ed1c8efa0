"""prepare_image against the HF image processors (transformers' PIL backend) of the three tiny models: the
same pixels, to the bit, for odd sizes, both orientations, RGBA, grayscale, a palette with transparency, PNG
and JPEG, an EXIF-rotated photo; idefics3's tiles (HF's default image splitting) and their prompt text as
Idefics3Processor writes it; and the one-line refusals."""

from __future__ import annotations

import io
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image, ImageOps
from transformers import Idefics3Processor

from hearth.media.config import read_vision_config
from hearth.media.images import prepare_image
from hearth.media.projectors import PROJECTORS
from tests.mmproj_factory import hf_processor, tiny_hf, write_mmproj


@pytest.fixture(scope="module")
def configs(tmp_path_factory):
    out = {}
    for name in PROJECTORS:
        path = tmp_path_factory.mktemp(name) / f"{name}.gguf"
        write_mmproj(path, name, tiny_hf(name))
        out[name] = read_vision_config(path)
    return out


def encoded(img: Image.Image, fmt: str, **save) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **save)
    return buf.getvalue()


def noise(w: int, h: int, mode: str = "RGB", seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    channels = {"RGB": 3, "RGBA": 4, "L": 1}[mode]
    arr = rng.integers(0, 256, (h, w, channels), dtype=np.uint8)
    return Image.fromarray(arr[..., 0] if channels == 1 else arr, mode)


def rotated_photo() -> bytes:
    """A JPEG whose EXIF orientation 6 says: turn it 90 degrees clockwise to see it upright."""
    exif = Image.Exif()
    exif[0x0112] = 6
    return encoded(noise(50, 30, seed=3), "JPEG", exif=exif, quality=90)


def palette_with_transparency() -> bytes:
    img = noise(40, 33, seed=4).convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    return encoded(img, "PNG", transparency=3)


IMAGES = {
    "png-wide-odd": lambda: encoded(noise(71, 45), "PNG"),
    "jpeg-tall": lambda: encoded(noise(30, 97, seed=1), "JPEG", quality=85),
    "png-rgba": lambda: encoded(noise(53, 53, "RGBA", seed=2), "PNG"),
    "png-gray": lambda: encoded(noise(64, 40, "L", seed=5), "PNG"),
    "png-palette-transparent": palette_with_transparency,
    "png-tiny": lambda: encoded(noise(5, 3, seed=6), "PNG"),
    "jpeg-exif-rotated": rotated_photo,
}


def hf_pixels(name: str, data: bytes, **kw) -> np.ndarray:
    """The HF processor's pixels [pieces, 3, S, S] for bytes opened as transformers' load_image opens them
    (EXIF-upright); Qwen-VL's [patches, 3 * 2 * p * p] as hearth holds them, [1, rows, cols, 4, ...] by its
    image_grid_thw (a reshape: the same bytes in the same order)."""
    img = ImageOps.exif_transpose(Image.open(io.BytesIO(data)))
    out = hf_processor(name, **kw)(images=img, return_tensors="np")
    if PROJECTORS[name].tower == "qwen2vl":  # Qwen2-VL, 2.5 and 3
        _, h, w = out["image_grid_thw"][0]
        return out["pixel_values"].reshape(1, h // 2, w // 2, 4, -1)
    return out["pixel_values"].reshape(-1, *out["pixel_values"].shape[-3:])


@pytest.mark.parametrize("image", IMAGES)
@pytest.mark.parametrize("name", PROJECTORS)
def test_pixels_equal_the_hf_processor(configs, name, image):
    data = IMAGES[image]()
    got = prepare_image(data, configs[name])
    want = hf_pixels(name, data)
    assert got.pixels.dtype == np.float32 and got.pixels.shape == want.shape
    assert (len(want) > 1) == (name == "idefics3")
    assert PROJECTORS[name].resize == "smart" or want.shape[1:] == (3,) + (configs[name].image_size,) * 2
    np.testing.assert_array_equal(got.pixels, want)


def test_exif_orientation_is_applied(configs):
    """The upright photo, not the stored one (HF's load_image for URLs and base64)."""
    data, cfg = rotated_photo(), configs["gemma3"]
    stored = hf_processor("gemma3")(images=Image.open(io.BytesIO(data)), return_tensors="np")["pixel_values"]
    assert np.abs(prepare_image(data, cfg).pixels - stored).max() > 0.5


def test_transparency_goes_onto_white(configs):
    clear = Image.new("RGBA", (20, 20), (0, 0, 0, 0))
    pixels = prepare_image(encoded(clear, "PNG"), configs["gemma3"]).pixels
    np.testing.assert_allclose(pixels, 1.0)  # white, normalized by mean 0.5 / std 0.5


def test_prompt_facts_come_from_the_projector(configs):
    data = IMAGES["png-wide-odd"]()
    for name, cfg in configs.items():
        p = prepare_image(data, cfg)
        spec = PROJECTORS[name]
        rows = cfg.num_embeds if p.grid is None else p.grid[0] * p.grid[1]  # Qwen-VL's: the image's own
        if spec.tower == "gemma4v":  # the image's own too: its pooled patches
            rows = p.pixels[0][0].size // (cfg.patch_size * cfg.merge) ** 2
        assert (p.num_embeds, p.after, p.placeholder, p.bidirectional) == \
            (rows, spec.after, spec.placeholder, spec.bidirectional)
        assert (p.grid is not None) == (spec.tower == "qwen2vl")
        assert p.befores[-1].endswith(spec.before)  # the global image's, last (after idefics3's tiles)
        assert len(p.befores) == len(p.pixels) == len(p.digests)
    g = prepare_image(data, configs["gemma3"])
    assert (g.num_embeds, g.placeholder, g.bidirectional) == (16, "<image_soft_token>", True)
    assert prepare_image(data, configs["mlp"]).placeholder is None


def test_digest_names_the_pixels(configs):
    cfg = configs["idefics3"]
    a, b = IMAGES["png-wide-odd"](), IMAGES["jpeg-tall"]()
    assert prepare_image(a, cfg).digests == prepare_image(a, cfg).digests
    assert set(prepare_image(a, cfg).digests).isdisjoint(prepare_image(b, cfg).digests)
    assert len(set(prepare_image(a, cfg).digests)) == len(prepare_image(a, cfg).digests)  # a piece each
    # the same picture in another container is the same pixels: the same KV
    same = encoded(Image.open(io.BytesIO(a)), "BMP")
    assert prepare_image(same, cfg).digests == prepare_image(a, cfg).digests
    assert prepare_image(a, cfg).digests != prepare_image(a, configs["gemma3"]).digests
    # equal tiles are equal rows (one flat colour): one digest, the encoder's cache and the KV shared
    flat = prepare_image(encoded(Image.new("RGB", (200, 130), (9, 99, 199)), "PNG"), cfg)
    assert len(flat.digests) == 5 and len(set(flat.digests[:-1])) == 1


TILED = {  # image (w, h), preproc_size (the first resize's longest edge) -> tile grid (rows, cols); S = 64
    "smaller-than-a-tile": ((40, 25), 64, (0, 0)),
    "exactly-one-tile": ((64, 64), 64, (0, 0)),
    "one-tile-when-resized": ((300, 200), 64, (0, 0)),
    "wide": ((71, 45), 96, (2, 2)),  # 96 x 60 -> 128 x 128 (60 * 128 / 96 = 80, up to 128)
    "wide-thin": ((250, 40), 160, (1, 3)),
    "tall": ((30, 97), 96, (2, 1)),
    "square-upscaled": ((20, 20), 200, (4, 4)),
    "huge": ((5000, 90), 5000, (2, 64)),  # the longest edge bounded by 4096 (Idefics3's MAX_IMAGE_SIZE)
}


@pytest.fixture(scope="module")
def tiled_configs(tmp_path_factory):
    model, out = tiny_hf("idefics3"), {}
    for preproc in sorted({t[1] for t in TILED.values()}):
        path = tmp_path_factory.mktemp("tiled") / f"i{preproc}.gguf"
        write_mmproj(path, "idefics3", model, preproc=preproc)
        out[preproc] = read_vision_config(path)
    return out


@pytest.mark.parametrize("case", TILED)
def test_tiles_and_their_prompt_equal_idefics3s_processor(tiled_configs, case):
    """Idefics3ImageProcessor's default (do_image_splitting): the tiles row by row, then the global image; and
    the text Idefics3Processor puts where the image was (its replace_image_token), piece by piece."""
    (w, h), preproc, (rows, cols) = TILED[case]
    data, cfg = encoded(noise(w, h, seed=w), "PNG"), tiled_configs[preproc]
    got = prepare_image(data, cfg)
    img = Image.open(io.BytesIO(data))
    hf = hf_processor("idefics3", preproc=preproc)(images=img, return_tensors="np", return_row_col_info=True)
    assert (hf["rows"], hf["cols"]) == ([[rows]], [[cols]])
    want = hf["pixel_values"][0]  # [pieces, 3, S, S]
    assert got.pixels.shape == want.shape == (rows * cols + 1, 3, 64, 64)
    np.testing.assert_array_equal(got.pixels, want)
    tokens = SimpleNamespace(fake_image_token="<fake_token_around_image>", global_image_tag="<global-img>",
                             image_token="<image>", image_seq_len=cfg.num_embeds)
    text = Idefics3Processor.replace_image_token(tokens, hf, 0)
    assert "".join(b + got.placeholder * got.num_embeds for b in got.befores) + got.after == text


def test_digest_names_the_mmproj_weights(tmp_path):
    """Two files with one config and other weights (another seed: as F16 vs Q8_0, or a fine-tune) make
    other rows: their digests differ, so neither's K/V is served for the other's image. A copy of a file
    is the same encoder: the same digest."""
    write_mmproj(tmp_path / "a.gguf", "gemma3", tiny_hf("gemma3", seed=0))
    write_mmproj(tmp_path / "b.gguf", "gemma3", tiny_hf("gemma3", seed=1))
    (tmp_path / "copy.gguf").write_bytes((tmp_path / "a.gguf").read_bytes())
    a, b, copy = (read_vision_config(tmp_path / f"{n}.gguf") for n in ("a", "b", "copy"))
    assert (tmp_path / "a.gguf").stat().st_size == (tmp_path / "b.gguf").stat().st_size
    img = IMAGES["png-wide-odd"]()
    assert prepare_image(img, a).digests != prepare_image(img, b).digests
    assert prepare_image(img, a).digests == prepare_image(img, copy).digests
    assert replace(a, weights="") == replace(b, weights="")  # only the weights tell them apart


@pytest.mark.parametrize("data, reason", [
    (b"this is not an image", "cannot read the image: not an image"),
    (b"", "cannot read the image: not an image"),
    (encoded(noise(40, 40), "PNG")[:60], "cannot read the image"),
    (encoded(noise(40, 40), "JPEG")[:300], "cannot read the image"),
    (b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4, "cannot read the image"),
    (b"GIF89a\x10\x00\x10\x00", "cannot read the image"),
    (encoded(noise(40, 40), "GIF")[:40], "cannot read the image"),
    (encoded(noise(40, 40), "BMP")[:200], "cannot read the image"),
    (encoded(noise(40, 40), "WEBP")[:100], "cannot read the image"),
])
def test_garbled_bytes_are_one_line_errors(configs, data, reason):
    with pytest.raises(ValueError, match=reason) as e:
        prepare_image(data, configs["mlp"])
    assert "\n" not in str(e.value)


def test_too_many_pixels_is_refused_before_decoding(configs):
    with pytest.raises(ValueError, match=r"image is 300x200 pixels, more than the 10000 allowed"):
        prepare_image(encoded(noise(300, 200), "PNG"), configs["mlp"], max_pixels=10_000)
    # a header that claims a decompression bomb (PIL's own limit): refused from the header alone
    bomb = bytearray(encoded(noise(8, 8), "BMP"))
    bomb[18:26] = (30000).to_bytes(4, "little") + (30000).to_bytes(4, "little")
    with pytest.raises(ValueError, match=r"image is more than the .* pixels allowed"):
        prepare_image(bytes(bomb), configs["mlp"])


@pytest.mark.parametrize("data,name", [
    (b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\n", "EPS"),  # Pillow's EPS plugin runs Ghostscript
    (encoded(noise(8, 8), "TIFF"), "TIFF"),
    (encoded(noise(8, 8), "PPM"), "PPM"),
])
def test_only_the_formats_users_send_are_read(configs, data, name):
    with pytest.raises(ValueError, match=f"{name} images are not taken: send JPEG, PNG, GIF, WEBP, BMP"):
        prepare_image(data, configs["mlp"])


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "GIF", "WEBP", "BMP"])
def test_the_formats_taken(configs, fmt):
    assert prepare_image(encoded(noise(8, 8), fmt), configs["mlp"]).pixels.shape[1] == 3  # [pieces, 3, S, S]
