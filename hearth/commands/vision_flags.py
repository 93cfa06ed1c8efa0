"""--mmproj (llama-server's, llama-mtmd-cli's): the model's vision tower and projector, so chat messages
may hold images; `hearth run` adds --image."""

from __future__ import annotations

import argparse


def add_vision_arguments(p: argparse.ArgumentParser, images: bool = False) -> None:
    g = p.add_argument_group("images (a llama.cpp mmproj GGUF: convert_hf_to_gguf.py --mmproj)")
    g.add_argument("--mmproj", "-mm", default="", metavar="FILE",
                   help="the model's vision projector: chat messages may then hold images (OpenAI image_url, "
                        "Anthropic image, Ollama images)")
    if images:
        g.add_argument("--image", action="append", default=[], metavar="FILE",
                       help="an image the prompt is about (llama-mtmd-cli's); repeat for more; needs --mmproj")


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
