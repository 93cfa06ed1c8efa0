"""A request's images: each protocol's image part becomes a marker in its message's text, and the
image's source is kept, in order, in the request's RequestImages. A marker carries a random per-request
nonce, so no text a client writes can stand for an image: a forged one stays text. The route awaits
`load()` (fetches and prepares every image in threads; through ServedModel.load_images, which keeps the model
loaded meanwhile) before it renders; hearth.api.media_prompt then splits the rendered prompt at the markers.

The parts, by protocol (READERS): OpenAI chat `image_url` ({"url"} or a string; `detail` ignored),
Responses `input_image` (`image_url`; `file_id` refused: hearth keeps no files), Anthropic `image`
(source base64 with a media_type, or url); Ollama's `images` (bare base64) call `add` directly."""

from __future__ import annotations

import asyncio
import secrets
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hearth.api.errors import APIError
from hearth.api.media_fetch import FETCH_POOL, FetchPolicy, b64_bytes, bad, fetch, url_bytes

ANTHROPIC_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
"""The media types Anthropic's base64 image source takes."""


MAX_IMAGES = 16
"""Images a request may hold by default (vLLM's --limit-mm-per-prompt defaults to 999: every image here is
fetched, decoded and encoded before the first token, so the default stays small)."""


@dataclass(frozen=True)
class Vision:
    """How a served model takes images: its mmproj's hearth.media.config.VisionConfig and the function that
    prepares one image for it (ServedModel.vision; None there: the model reads text only)."""
    cfg: Any
    prepare: Callable[[bytes], Any] | None = None
    """bytes -> hearth.media.images.PreparedImage, ValueError for what is no usable image; None:
    hearth.media.images.prepare_image with `cfg`."""
    path: str = ""
    """The mmproj file it was read from ("": not known)."""
    fetch_policy: FetchPolicy = FetchPolicy()
    """Where its http(s) images may come from (--allowed-media-domains, --allow-private-media-urls)."""
    max_images: int = MAX_IMAGES
    """Most images one request may hold (--limit-mm-per-prompt, vLLM's)."""

    def prepare_image(self, data: bytes):
        if self.prepare is not None:
            return self.prepare(data)
        from hearth.media.images import prepare_image  # the vision-encoder's; Pillow loads only with an mmproj
        return prepare_image(data, self.cfg)


ANY_IMAGES = Vision(None, max_images=sys.maxsize)
"""What a model not yet loaded takes where the pool does not know its projector (hearth.api.model_spec.Known, a pool
built without its files' facts): any image part passes the reading before its load; its own Vision decides after."""


def text_only(field: str) -> APIError:
    return bad(field, "images are not supported: this model reads text only (serve it with its vision "
                      "projector: `--mmproj FILE` for the first model, a --models entry's `mmproj` for another)")


@dataclass(slots=True)
class ImagePart:
    field: str
    """The request field that gave it (`messages[1].content[0].image_url`): every error names it."""
    data: bytes | None = None
    url: str | None = None
    """An http(s) URL still to fetch (data None)."""
    image: Any = None
    """Its PreparedImage, once loaded."""


class RequestImages:
    """A request's images, in the order its messages hold them (a falsy one: none). `vision` None: the
    model reads text only, and the first image part is a 400 that says how to serve one that does not."""

    def __init__(self, vision: Vision | None):
        self.vision = vision
        self.nonce = secrets.token_hex(8)
        self.parts: list[ImagePart] = []

    def __len__(self) -> int:
        return len(self.parts)

    def marker(self, k: int) -> str:
        return f"<__hearth_image_{self.nonce}_{k}__>"

    def continued(self, vision: Vision | None) -> RequestImages:
        """A follow-up's images (Responses' previous_response_id): the same nonce, so the stored
        conversation's markers still name their images, and more may be added. Prepared again on load
        (kept as bytes only: a prepared image's pixels are large)."""
        out = RequestImages(vision)
        out.nonce = self.nonce
        out.parts = [ImagePart(p.field, p.data, p.url) for p in self.parts]
        return out

    def nbytes(self) -> int:
        """Bytes of image data it holds (a stored response's share of the store's image budget)."""
        return sum(len(p.data) for p in self.parts if p.data is not None)

    def drop_bytes(self) -> None:
        """Forget the images' bytes (the store's budget is spent): a URL is fetched again on a follow-up;
        an inline image is a 400 there, asking for it again."""
        for p in self.parts:
            p.data, p.image = None, None

    def require(self, field: str) -> None:
        """A 400 naming `field` unless the model takes images."""
        if self.vision is None:
            raise text_only(field)

    def add_url(self, field: str, url) -> str:
        """The marker of a new image from a URL (a data URL decoded now, an http(s) one fetched on load)."""
        self._room(field)
        data = url_bytes(url, field)
        return self._added(ImagePart(field, data, url if data is None else None))

    def add_b64(self, field: str, b64) -> str:
        """The marker of a new image from bare base64 (decoded now)."""
        self._room(field)
        return self._added(ImagePart(field, b64_bytes(b64, field)))

    def _room(self, field: str) -> None:
        """A 400 naming `field` unless the model takes images and the request has room for one more."""
        self.require(field)
        if len(self.parts) >= self.vision.max_images:
            raise bad(field, f"more than {self.vision.max_images} images in one request (the server's "
                             "--limit-mm-per-prompt)")

    def _added(self, part: ImagePart) -> str:
        self.parts.append(part)
        return self.marker(len(self.parts) - 1)

    def part(self, nonce: str, k: str) -> ImagePart | None:
        """The image a marker's groups name; None for a marker of no image of this request (text)."""
        i = int(k)
        return self.parts[i] if nonce == self.nonce and i < len(self.parts) else None

    async def load(self) -> None:
        """Fetch what is fetched and prepare every image for the model, in threads (a 400 naming the part's
        field where one fails: the first such in the request's order)."""
        todo = [p for p in self.parts if p.image is None]
        loop = asyncio.get_running_loop()
        done = await asyncio.gather(*(loop.run_in_executor(FETCH_POOL, self.load_now, p) for p in todo),
                                    return_exceptions=True)
        for failed in done:
            if isinstance(failed, BaseException):
                raise failed

    def load_now(self, part: ImagePart) -> None:
        """Fetch (if a URL) and prepare one image, in this thread (load() runs these in FETCH_POOL). Whatever
        goes wrong is a 400 naming the part's field, never a 500."""
        if self.vision is None:  # a follow-up's stored images, asked of a model that reads text only
            raise text_only(part.field)
        if part.data is None and part.url is None:
            raise bad(part.field, "an image of an earlier response that the server no longer keeps (its store "
                                  "of images is full): send the conversation again with the image")
        if part.data is None:
            try:
                part.data = fetch(part.url, part.field, self.vision.fetch_policy)
            except APIError:
                raise
            except Exception as e:  # noqa: BLE001 - a fetch's surprise is the request's 400, not a 500
                raise bad(part.field, f"fetching {part.url!r} failed ({type(e).__name__})") from None
        try:
            part.image = self.vision.prepare_image(part.data)
        except (ValueError, OSError) as e:  # OSError: Pillow's for a truncated or unknown file, if one gets by
            raise bad(part.field, str(e) or "not an image") from None


def read_part(part: dict, at: str, images: RequestImages | None) -> str | None:
    """The marker of an image content part (any protocol's, READERS); None: not an image part."""
    kind = part.get("type")
    reader = READERS.get(kind) if isinstance(kind, str) else None  # a list is no key (a 500); the text reader names it
    if reader is None:
        return None
    if images is None:  # the library's messages (LLM.chat): no images come that way
        raise text_only(f"{at}.type")
    images.require(f"{at}.type")
    return reader(part, at, images)


def _openai_image(part: dict, at: str, images: RequestImages) -> str:
    value = part.get("image_url")
    if isinstance(value, dict):
        return images.add_url(f"{at}.image_url.url", value.get("url"))
    return images.add_url(f"{at}.image_url", value)


def _responses_image(part: dict, at: str, images: RequestImages) -> str:
    if part.get("image_url") is None and part.get("file_id") is not None:
        raise bad(f"{at}.file_id", "hearth keeps no files (/v1/files): send the image as image_url, a "
                                   "data:image/...;base64, URL or an http(s) URL")
    return images.add_url(f"{at}.image_url", part.get("image_url"))


def _anthropic_image(part: dict, at: str, images: RequestImages) -> str:
    source = part.get("source")
    kind = source.get("type") if isinstance(source, dict) else None
    if kind == "base64":
        media_type = source.get("media_type")
        if media_type not in ANTHROPIC_TYPES:
            raise bad(f"{at}.source.media_type", f"must be one of {', '.join(ANTHROPIC_TYPES)}, got {media_type!r}")
        return images.add_b64(f"{at}.source.data", source.get("data"))
    if kind == "url":
        return images.add_url(f"{at}.source.url", source.get("url"))
    if not isinstance(source, dict):  # OpenAI's spelling sent as Anthropic's `image` type, say
        raise bad(f"{at}.source", "an image part of type 'image' (Anthropic's) needs a source {type: base64 | url}; "
                                  "OpenAI's is {type: image_url, image_url: {url: ...}}")
    raise bad(f"{at}.source.type", f"must be 'base64' or 'url', got {kind!r}")


READERS: dict[str, Callable[[dict, str, RequestImages], str]] = {
    "image_url": _openai_image, "input_image": _responses_image, "image": _anthropic_image}
