"""`hearth pull MODEL`: download a model once (progress on stderr) and print its local path."""

from __future__ import annotations

import argparse

from hearth.loader.catalog import DEFAULT_MODEL
from hearth.loader.gguf_loader import check_header
from hearth.loader.resolve import resolve_model


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", nargs="?", default=DEFAULT_MODEL,
                        help="catalog name (see `hearth models`) or a Hugging Face reference "
                             f"org/repo:file.gguf (default: {DEFAULT_MODEL})")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bars")


def main(args: argparse.Namespace) -> int:
    # an already-downloaded model is verified (size + cached checksum) and not fetched again
    path = resolve_model(args.model, download=True, progress=not args.quiet)
    check_header(path)  # a local path is any file: one `hearth run` would refuse is said now, not printed as pulled
    print(path)
    return 0
