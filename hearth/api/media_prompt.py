"""A rendered chat prompt with image markers (hearth.api.media_parts) -> prompt ids with each image's rows
in place, and the MediaInput records the engine takes with them (mtmd's way, llama.cpp tools/mtmd):

    text before + image.befores[0] | [placeholder id] * num_embeds | image.befores[1] | ... | image.after + text after

an image being one piece or several (idefics3's tiles), a MediaInput each; each text piece tokenized on its
own (BOS once, at the start, as ServedModel.encode_chat_text). A marker whose nonce or index names no image
of the request is text a client wrote, and stays text."""

from __future__ import annotations

from collections.abc import Iterable

from hearth.api.media_fetch import bad
from hearth.api.media_parts import RequestImages
from hearth.media.inputs import MediaInput
from hearth.media.marker import MARKER


class PromptIds(list):
    """Prompt token ids (a list, as everywhere) with `media`: the MediaInputs of the image rows they hold,
    sorted by offset. Appending ids keeps them (a tool guard's continuation: `ids + more`); a prompt
    without images is a plain list (Generation reads `media` where it is)."""
    __slots__ = ("media",)

    def __init__(self, ids: Iterable[int] = (), media: Iterable[MediaInput] = ()):
        super().__init__(ids)
        self.media = tuple(media)

    def __add__(self, other) -> PromptIds:
        return PromptIds(list.__add__(self, list(other)), self.media)


def prompt_media(ids) -> tuple[MediaInput, ...]:
    return getattr(ids, "media", ())


def shifted(before: list[int], ids) -> list[int]:
    """`before + ids`, their media moved along (Ollama's `context` ahead of a prompt)."""
    media = prompt_media(ids)
    if not media:
        return before + list(ids)
    n = len(before)
    return PromptIds(before + list(ids), [_moved(m, n) for m in media])


def _moved(m: MediaInput, n: int) -> MediaInput:
    return MediaInput(m.offset + n, m.length, m.digest, m.pixels, m.bidirectional, m.grid)


def encode_with_images(served, text: str, images: RequestImages, messages: list[dict]) -> PromptIds:
    """`text` rendered from `messages` as ids with the images' rows. An image whose marker the messages
    hold but the template left out is a 400 naming its field. The images must be loaded for `served`."""
    if served.vision is None or served.vision is not images.vision:  # a router's small model, say
        raise bad(images.parts[0].field, f"images are not supported by model {served.name!r} (no --mmproj, "
                                         "or another one)")
    tok = served.tokenizer
    ids: list[int] = []
    media: list[MediaInput] = []
    carried, at, seen = "", 0, set()
    for m in MARKER.finditer(text):
        part = images.part(*m.groups())
        if part is None:
            continue
        seen.add(int(m.group(2)))
        image = part.image
        carried, fill = carried + text[at:m.start()], _placeholder_id(tok, image.placeholder)
        for before, pixels, digest in zip(image.befores, image.pixels, image.digests, strict=True):
            ids += _encode(served, carried + before, first=not ids)
            media.append(MediaInput(len(ids), image.num_embeds, digest, pixels, image.bidirectional, image.grid))
            ids += [fill] * image.num_embeds
            carried = ""
        carried, at = image.after, m.end()
    ids += _encode(served, carried + text[at:], first=not ids)
    for k in sorted(_markers_in(messages, images) - seen)[:1]:
        raise bad(images.parts[k].field, "the model's chat template left this image out of the prompt")
    return PromptIds(ids, media)


MEDIA_MARKER = "<__media__>"
"""llama.cpp's (mtmd_default_marker): where /apply-template's prompt shows an image."""


def shown(text: str, images: RequestImages) -> str:
    """A rendered prompt as a client reads it: each of the request's markers as MEDIA_MARKER."""
    if not images:
        return text
    return MARKER.sub(lambda m: MEDIA_MARKER if images.part(*m.groups()) else m.group(0), text)


def _encode(served, text: str, first: bool) -> list[int]:
    if first:
        return served.encode_chat_text(text)
    return served.tokenizer.encode(text, add_special_tokens=False, parse_special=True) if text else []


def _placeholder_id(tok, placeholder: str | None) -> int:
    """The id that fills an image's places (the model reads its rows there, never this id's embedding)."""
    if not placeholder:
        return 0
    ids = tok.encode(placeholder, add_special_tokens=False, parse_special=True)
    return ids[0] if len(ids) == 1 else 0


def _markers_in(messages: list[dict], images: RequestImages) -> set[int]:
    """Indices of the images whose markers the messages' texts hold (a compacted-away turn's are not)."""
    found = set()
    for msg in messages:
        content = msg.get("content")
        for m in MARKER.finditer(content if isinstance(content, str) else ""):
            if images.part(*m.groups()) is not None:
                found.add(int(m.group(2)))
    return found
