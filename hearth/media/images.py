"""Image bytes -> the pixels an mmproj's tower reads, as the HF image processor of its model makes them
(transformers' PIL backend): decode, upright by the EXIF orientation (HF's load_image, its path for URLs
and base64), transparency onto white and RGB (HF's convert_to_rgb), resize (the projector's recipe),
rescale by 1/255, normalize with the file's mean and std."""

from __future__ import annotations

import hashlib
import io
import math
import warnings
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageOps

from hearth.media.config import VisionConfig
from hearth.media.image_cache import PreparedCache
from hearth.media.merge_units import patchify, resize as smart_resize

MAX_PIXELS = 64 * 1024 * 1024
"""Largest width x height decoded (~8k x 8k); a bigger one is refused before its pixels are read."""
MAX_HF_SIDE = 4096
"""Idefics3's processor bounds its first resize's longest edge by this (its MAX_IMAGE_SIZE)."""


@dataclass(frozen=True, slots=True)
class PreparedImage:
    """One image as the prompt holds it: one piece (mlp, gemma3, a small idefics3 image) or several (idefics3's
    tiles and its global image), each piece `num_embeds` rows of its own pixels after its own text."""
    pixels: np.ndarray
    """float32 [pieces, 3, S, S], resized and normalized as the HF processor does, in prompt order (Qwen-VL:
    [1, rows, cols, m * m, 3 * T * p * p], its processor's pixel_values: hearth.media.merge_units)."""
    num_embeds: int
    """Embedding rows each piece becomes."""
    befores: tuple[str, ...]
    """Prompt text right before each piece's rows (hearth.media.projectors.Projector.befores)."""
    after: str
    """Prompt text right after the last piece's rows."""
    placeholder: str | None
    """A token text whose id fills the rows' places in prompt_token_ids (None: the API uses id 0)."""
    bidirectional: bool
    """The LM attends within a piece's rows both ways (gemma3)."""
    digests: tuple[bytes, ...]
    """Per piece, sha256 over its pixels' bytes and shape and the config (the mmproj's fingerprint in it): equal
    pieces through equal encoders share prefix-cache KV and rows."""
    grid: tuple[int, int] | None = None
    """(rows, cols) of each piece's embedding rows, row-major, for M-RoPE (qwen2vl projectors); None: 1-D."""


PREPARED = PreparedCache()
"""Recent images, prepared: a chat's image is read once, not at every turn (image_cache)."""


def prepare_image(data: bytes, cfg: VisionConfig, max_pixels: int = MAX_PIXELS) -> PreparedImage:
    """ValueError with a short reason for bytes PIL cannot read as an image, or one over max_pixels (not kept).
    The result is shared with later calls for the same bytes and config: its pixels are read, never written."""
    key = (hashlib.sha256(data).digest(), repr(cfg), max_pixels)
    return PREPARED.get(key, lambda: _prepare(data, cfg, max_pixels))


def _prepare(data: bytes, cfg: VisionConfig, max_pixels: int) -> PreparedImage:
    frames, rows, cols = RESIZES[cfg.spec.resize](decode(data, max_pixels), cfg)  # uint8 [pieces, S, S, 3]
    # HF's rescale (f64 product, then f32) and normalize (f32), bit for bit
    x = (frames.astype(np.float64) * (1 / 255)).astype(np.float32)
    x = (x - np.asarray(cfg.mean, np.float32)) / np.asarray(cfg.std, np.float32)
    pixels, num_embeds, grid = LAYOUTS[cfg.spec.tower](np.ascontiguousarray(x.transpose(0, 3, 1, 2)), cfg)
    spec, salt = cfg.spec, repr(cfg).encode()
    # the shape too: Qwen-VL's pieces of one size may hold other grids (2 x 3 rows or 3 x 2)
    digests = tuple(hashlib.sha256(p.tobytes() + repr(p.shape).encode() + salt).digest() for p in pixels)
    return PreparedImage(pixels, num_embeds, spec.befores(rows, cols), spec.after, spec.placeholder,
                         spec.bidirectional, digests, grid)


def decode(data: bytes, max_pixels: int = MAX_PIXELS) -> Image.Image:
    """Bytes -> an upright RGB PIL image (transparent parts white). Whatever a decoder raises on bad bytes
    becomes one ValueError: a malformed upload is the client's error, never a crash."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            img = Image.open(io.BytesIO(data), formats=FORMATS)
        except Image.UnidentifiedImageError:
            raise ValueError(_unread(data)) from None
        except (Image.DecompressionBombError, Image.DecompressionBombWarning):
            raise ValueError(f"image is more than the {max_pixels} pixels allowed") from None
        except Exception as e:  # noqa: BLE001 - PIL's plugins raise many kinds on garbled bytes
            raise ValueError(f"cannot read the image: {_reason(e)}") from None
    w, h = img.size
    if w * h > max_pixels:
        raise ValueError(f"image is {w}x{h} pixels, more than the {max_pixels} allowed")
    try:
        img.load()
        img = ImageOps.exif_transpose(img)
        if "A" in img.getbands() or img.info.get("transparency") is not None:
            img = Image.alpha_composite(Image.new("RGBA", img.size, (255, 255, 255, 255)), img.convert("RGBA"))
        return img.convert("RGB")
    except Exception as e:  # noqa: BLE001
        raise ValueError(f"cannot read the image: {_reason(e)}") from None


FORMATS = ("JPEG", "PNG", "GIF", "WEBP", "BMP")
"""The formats read: what OpenAI and Anthropic take, and BMP. Pillow's others stay shut (EPS runs Ghostscript)."""


def _unread(data: bytes) -> str:
    """Why bytes are no image read here: another format, named from its first bytes (Pillow's `accept`
    checks look at the prefix only; nothing of it is decoded), or no image at all."""
    Image.init()
    head = data[:64]
    for name, (_, accept) in Image.OPEN.items():
        try:
            if name not in FORMATS and accept is not None and accept(head):
                return f"{name} images are not taken: send {', '.join(FORMATS)}"
        except Exception:  # noqa: BLE001 - an accept check that trips on short data: not that format
            continue
    return "cannot read the image: not an image"


def _reason(e: Exception) -> str:
    if isinstance(e, Image.UnidentifiedImageError):
        return "not an image"
    return " ".join(str(e).split()) or type(e).__name__


def _crop(img: Image.Image, cfg: VisionConfig):
    """CLIPImageProcessor: shortest edge to S (the long one truncated as int()), then the centre S x S."""
    s, (w, h) = cfg.image_size, img.size
    short, long = min(w, h), max(w, h)
    new_long = int(s * long / short)
    size = (s, new_long) if w <= h else (new_long, s)  # PIL (width, height)
    arr = np.asarray(img.resize(size, resample=Image.Resampling[cfg.spec.resample]))
    top, left = (arr.shape[0] - s) // 2, (arr.shape[1] - s) // 2
    return arr[None, top:top + s, left:left + s], 0, 0


def _square(img: Image.Image, cfg: VisionConfig):
    """Siglip/Gemma3ImageProcessor: straight to S x S, the aspect ratio not kept."""
    return _to_square(img, cfg)[None], 0, 0


def _to_square(img: Image.Image, cfg: VisionConfig) -> np.ndarray:
    return np.asarray(img.resize((cfg.image_size, cfg.image_size), resample=Image.Resampling[cfg.spec.resample]))


def _split(img: Image.Image, cfg: VisionConfig):
    """Idefics3ImageProcessor's default (do_image_splitting): longest edge to preproc_size, then each edge up to
    a multiple of S, cut into S x S tiles row by row, and that whole image to S x S last (the global image);
    one that is S x S by then is the global image alone (0 rows, 0 cols). Every resize with its filter."""
    img = img.resize(_longest_edge(*img.size, cfg.preproc_size), resample=Image.Resampling[cfg.spec.resample])
    img = img.resize(_multiples(*img.size, cfg.image_size), resample=Image.Resampling[cfg.spec.resample])
    s, (w, h) = cfg.image_size, img.size
    if w <= s and h <= s:
        return np.asarray(img)[None], 0, 0
    arr = np.asarray(img)  # [h, w, 3]; both multiples of S
    rows, cols = h // s, w // s
    tiles = [arr[r * s:(r + 1) * s, c * s:(c + 1) * s] for r in range(rows) for c in range(cols)]
    return np.stack([*tiles, _to_square(img, cfg)]), rows, cols


def _longest_edge(w: int, h: int, n: int) -> tuple[int, int]:
    """PIL (width, height) with the longest edge n and the other even, as Idefics3's
    _resize_output_size_rescale_to_max_len rounds it, then bounded by its MAX_IMAGE_SIZE."""
    aspect = w / h
    if w >= h:
        w, h = n, int(n / aspect)
        h += h % 2
    else:
        h, w = n, int(n * aspect)
        w += w % 2
    h, w = max(h, 1), max(w, 1)
    if w >= h and w > MAX_HF_SIDE:
        w, h = MAX_HF_SIDE, int(MAX_HF_SIDE / (w / h))
    elif h > w and h > MAX_HF_SIDE:
        h, w = MAX_HF_SIDE, int(MAX_HF_SIDE * (w / h))
    return max(w, 1), max(h, 1)


def _multiples(w: int, h: int, s: int) -> tuple[int, int]:
    """Idefics3's resize_for_vision_encoder: the longest edge up to a multiple of s, the other kept in aspect
    (truncated) and then up to one too."""
    aspect = w / h
    if w >= h:
        w = math.ceil(w / s) * s
        h = math.ceil(int(w / aspect) / s) * s
    else:
        h = math.ceil(h / s) * s
        w = math.ceil(int(h * aspect) / s) * s
    return w, h


RESIZES = {"crop": _crop, "square": _square, "split": _split, "smart": smart_resize}
"""Projector.resize -> (RGB image, cfg) -> (uint8 [pieces, H, W, 3], rows, cols of the tile grid: 0, 0 for one)."""

LAYOUTS = {"vit": lambda pixels, cfg: (pixels, cfg.num_embeds, None), "qwen2vl": patchify,
           "gemma4v": lambda pixels, cfg: (pixels, pixels[0, 0].size // (cfg.patch_size * cfg.merge) ** 2, None)}
"""Projector.tower -> (f32 [pieces, 3, H, W], cfg) -> (the pixels that tower reads, rows a piece, M-RoPE grid)."""
