"""Image bytes -> the pixels an mmproj's tower reads, as the HF image processor of its model makes them
(transformers' PIL backend): decode, upright by the EXIF orientation (HF's load_image, its path for URLs
and base64), transparency onto white and RGB (HF's convert_to_rgb), resize (the projector's recipe),
rescale by 1/255, normalize with the file's mean and std."""

from __future__ import annotations

import hashlib
import io
import warnings
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageOps

from hearth.media.config import VisionConfig

MAX_PIXELS = 64 * 1024 * 1024
"""Largest width x height decoded (~8k x 8k); a bigger one is refused before its pixels are read."""
MAX_HF_SIDE = 4096
"""Idefics3's processor bounds its first resize's longest edge by this (its MAX_IMAGE_SIZE)."""


@dataclass(frozen=True, slots=True)
class PreparedImage:
    pixels: np.ndarray
    """float32 [3, S, S], resized and normalized as the HF processor does."""
    num_embeds: int
    """Embedding rows it becomes."""
    before: str
    after: str
    """Prompt text right before and right after the rows (hearth.media.projectors)."""
    placeholder: str | None
    """A token text whose id fills the rows' places in prompt_token_ids (None: the API uses id 0)."""
    bidirectional: bool
    """The LM attends within these rows both ways (gemma3)."""
    digest: bytes
    """sha256 over the pixels' bytes and the config: equal images share prefix-cache KV."""


def prepare_image(data: bytes, cfg: VisionConfig, max_pixels: int = MAX_PIXELS) -> PreparedImage:
    """ValueError with a short reason for bytes PIL cannot read as an image, or one over max_pixels."""
    rgb = RESIZES[cfg.spec.resize](decode(data, max_pixels), cfg)  # uint8 [S, S, 3]
    # HF's rescale (f64 product, then f32) and normalize (f32), bit for bit
    x = (rgb.astype(np.float64) * (1 / 255)).astype(np.float32)
    x = (x - np.asarray(cfg.mean, np.float32)) / np.asarray(cfg.std, np.float32)
    pixels = np.ascontiguousarray(x.transpose(2, 0, 1))  # [3, S, S]
    spec = cfg.spec
    digest = hashlib.sha256(pixels.tobytes() + repr(cfg).encode()).digest()
    return PreparedImage(pixels, cfg.num_embeds, spec.before, spec.after, spec.placeholder, spec.bidirectional,
                         digest)


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


def _crop(img: Image.Image, cfg: VisionConfig) -> np.ndarray:
    """CLIPImageProcessor: shortest edge to S (the long one truncated as int()), then the centre S x S."""
    s, (w, h) = cfg.image_size, img.size
    short, long = min(w, h), max(w, h)
    new_long = int(s * long / short)
    size = (s, new_long) if w <= h else (new_long, s)  # PIL (width, height)
    arr = np.asarray(img.resize(size, resample=cfg.spec.resample))
    top, left = (arr.shape[0] - s) // 2, (arr.shape[1] - s) // 2
    return arr[top:top + s, left:left + s]


def _square(img: Image.Image, cfg: VisionConfig) -> np.ndarray:
    """Siglip/Gemma3ImageProcessor: straight to S x S, the aspect ratio not kept."""
    return np.asarray(img.resize((cfg.image_size, cfg.image_size), resample=cfg.spec.resample))


def _longest_then_square(img: Image.Image, cfg: VisionConfig) -> np.ndarray:
    """Idefics3ImageProcessor, do_image_splitting=False: longest edge to preproc_size (the other edge even,
    as its _resize_output_size_rescale_to_max_len rounds it), bounded by 4096, then S x S; both resizes
    with its filter."""
    w, h = img.size
    n, aspect = cfg.preproc_size, w / h
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
    img = img.resize((max(w, 1), max(h, 1)), resample=cfg.spec.resample)
    return _square(img, cfg)


RESIZES = {"crop": _crop, "square": _square, "longest_then_square": _longest_then_square}
"""Projector.resize -> (RGB image, cfg) -> uint8 [S, S, 3]."""
