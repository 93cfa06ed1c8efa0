"""--mmproj (llama-server's, llama-mtmd-cli's): the model's vision tower and projector, so chat messages
may hold images; `hearth run` adds --image."""

from __future__ import annotations

import argparse
import json

MAX_IMAGES = 16
"""hearth.api.media_parts.MAX_IMAGES (the commands read no hearth.api before they must)."""


def add_vision_arguments(p: argparse.ArgumentParser, images: bool = False) -> None:
    g = p.add_argument_group("images (a llama.cpp mmproj GGUF: convert_hf_to_gguf.py --mmproj)")
    g.add_argument("--mmproj", "-mm", default="", metavar="FILE",
                   help="the model's vision projector: chat messages may then hold images (OpenAI image_url, "
                        "Anthropic image, Ollama images)")
    if not images:  # the server's: where fetched images may come from, how many a request holds
        g.add_argument("--allowed-media-domains", nargs="+", default=[], metavar="HOST",
                       help="fetch http(s) images only from these hosts (vLLM's; default: any public host)")
        g.add_argument("--allow-private-media-urls", action="store_true",
                       help="fetch images from loopback, private and link-local addresses too (refused by "
                            "default: a request must not reach this machine's or its network's services)")
        g.add_argument("--limit-mm-per-prompt", type=image_limit, default=None, metavar='\'{"image": N}\'',
                       help=f"most images one request may hold (vLLM's; JSON or image=N; default {MAX_IMAGES})")
    if images:
        g.add_argument("--image", action="append", default=[], metavar="FILE",
                       help="an image the prompt is about (llama-mtmd-cli's); repeat for more; needs --mmproj")


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
    """`hearth run --image`'s files as chat content parts (data URLs), read before the model loads: a
    missing file, or --image without --mmproj, is one line."""
    import base64
    import mimetypes

    from hearth.errors import HearthError

    if args.image and not args.mmproj:
        raise HearthError("--image needs the model's vision projector: add --mmproj FILE")
    if args.image and args.mode == "text":
        raise HearthError("--image is a chat's, and --raw completes text: drop one of them")
    parts = []
    for path in args.image:
        try:
            with open(path, "rb") as f:
                data = base64.b64encode(f.read()).decode()
        except OSError as e:
            raise HearthError(f"--image {path}: {e.strerror or e}") from None
        kind = mimetypes.guess_type(path)[0] or "image/png"  # the bytes decide: Pillow reads what it is
        parts.append({"type": "image_url", "image_url": {"url": f"data:{kind};base64,{data}"}})
    return parts
