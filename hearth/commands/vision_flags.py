"""--mmproj (llama-server's, llama-mtmd-cli's): the model's vision tower and projector, so chat messages
may hold images; `hearth run` adds --image (and its /image command reads one the same way)."""

from __future__ import annotations

import argparse
import json

from hearth.errors import HearthError

MAX_IMAGES = 16
"""hearth.api.media_parts.MAX_IMAGES (the commands read no hearth.api before they must)."""

NOT_AN_IMAGE = "cannot read the image: "  # prepare_image's words for the API, where the field names the part


def add_vision_arguments(p: argparse.ArgumentParser, images: bool = False) -> None:
    g = p.add_argument_group("images (a llama.cpp mmproj GGUF: convert_hf_to_gguf.py --mmproj)")
    which = g.add_mutually_exclusive_group()
    which.add_argument("--mmproj", "-mm", default="", metavar="FILE",
                       help="the model's vision projector: chat messages may then hold images (OpenAI image_url, "
                            "Anthropic image, Ollama images)")
    which.add_argument("--no-mmproj", action="store_true",
                       help="llama.cpp's (no projector downloaded with -hf): hearth loads a projector only when "
                            "--mmproj names one")
    g.add_argument("--no-mmproj-offload", action="store_true",
                   help="llama.cpp's (the projector kept off the GPU): hearth runs the projector on the CPU "
                        "whatever --device")
    if not images:  # the server's: where fetched images may come from, how many a request holds
        g.add_argument("--allowed-media-domains", nargs="+", default=[], metavar="HOST",
                       help="fetch http(s) images only from these hosts (vLLM's; default: any public host)")
        g.add_argument("--allow-private-media-urls", action="store_true",
                       help="fetch images from loopback, private and link-local addresses too (refused by "
                            "default: a request must not reach this machine's or its network's services)")
        g.add_argument("--limit-mm-per-prompt", type=image_limit, default=None, metavar='\'{"image": N}\'',
                       help=f"most images one request may hold (vLLM's; JSON or image=N; default {MAX_IMAGES})")
    if images:
        g.add_argument("--image", action="append", default=[], metavar="FILE|URL",
                       help="an image the prompt is about (llama-mtmd-cli's): a file, an http(s) URL or a data: "
                            "URL; repeat for more; needs --mmproj; typed in a chat, `/image FILE` adds one to the "
                            "next message")


def image_limit(text: str) -> int:
    """--limit-mm-per-prompt's value: vLLM's JSON ({"image": 4}) or its older image=4; images only."""
    try:
        limits = json.loads(text) if text.lstrip().startswith("{") else \
            {k.strip(): int(v) for k, v in (item.split("=", 1) for item in text.split(","))}
    except ValueError:
        raise argparse.ArgumentTypeError(f'{text!r}: expected JSON like \'{{"image": 4}}\' or image=4') from None
    other = sorted(set(limits) - {"image"}) if isinstance(limits, dict) else ["?"]
    if other or not isinstance(limits.get("image", 0), int) or limits.get("image", 0) < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: hearth takes images only, as a count >= 0 "
                                         f"(got {', '.join(map(str, other)) or limits.get('image')!r})")
    return limits.get("image")  # None: the default


def image_parts(args: argparse.Namespace) -> list[dict]:
    """`hearth run --image`'s images as chat content parts (data URLs), read and checked before the model loads:
    a missing file, one that is no image, or --image without --mmproj, is one line naming it."""
    if args.image and not args.mmproj:
        raise HearthError("--image needs the model's vision projector: add --mmproj FILE")
    if args.image and args.mode == "text":
        raise HearthError("--image is a chat's, and --raw completes text: drop one of them")
    if not args.image:
        return []
    cfg = mmproj_config(args.mmproj)
    return [image_part(source, cfg, "--image") for source in args.image]


def mmproj_config(mmproj: str):
    """--mmproj's VisionConfig, read without the model (a bad file is one line)."""
    from hearth.llm_vision import vision_config

    return vision_config(mmproj, arch_embeds_only=False)


def image_part(source: str, cfg, flag: str) -> dict:
    """One image as a chat content part (a data URL): a file's bytes, an http(s) URL's (fetched now) or a data
    URL's, prepared once for the projector here, so a bad one is `FLAG SOURCE: why` (not the API's field
    names), and the chat's own preparing of the same bytes is a cache hit (hearth.media.images.PREPARED)."""
    import base64
    import mimetypes

    from hearth.media.images import prepare_image

    shown = f"{flag} {source.split(',', 1)[0] + ',...' if source.lower().startswith('data:') else source}"
    data = _image_bytes(source, shown)
    try:
        prepare_image(data, cfg)
    except ValueError as e:
        raise HearthError(f"{shown}: {str(e).removeprefix(NOT_AN_IMAGE)}") from None
    kind = mimetypes.guess_type(source.split("?", 1)[0])[0] or "image/png"  # the bytes decide: Pillow reads what it is
    return {"type": "image_url", "image_url": {"url": f"data:{kind};base64,{base64.b64encode(data).decode()}"}}


def _image_bytes(source: str, shown: str) -> bytes:
    if source.lower().startswith(("http://", "https://", "data:")):
        from hearth.api.errors import APIError
        from hearth.api.media_fetch import USER_GIVEN, fetch, url_bytes

        try:
            data = url_bytes(source, shown)
            return data if data is not None else fetch(source, shown, USER_GIVEN)  # the user's own URL
        except APIError as e:  # its message names `shown`
            raise HearthError(e.message) from None
    try:
        with open(source, "rb") as f:
            return f.read()
    except OSError as e:
        raise HearthError(f"{shown}: {e.strerror or e}") from None
