"""Where `hearth run` gets its model and prompt: MODEL or llama-cli's -m FILE, PROMPT, -p PROMPT or -f FILE,
and a pipe or file on stdin (read whole, before PROMPT)."""

from __future__ import annotations

import argparse
import os
import stat
import sys

from hearth.commands.output_flags import read_text_file
from hearth.config import DEFAULT_MODEL
from hearth.errors import HearthError


def piped_input() -> str:
    """The text a pipe or a file on stdin holds: before PROMPT (`cat notes.md | hearth run m "summarize"`, as
    `ollama run` and `llm` read it; it was dropped without a word), or the prompt itself without one (ollama's
    too: a piped file was a chat turn per line). A terminal, /dev/null or a stream without a descriptor
    (pytest's capture, where a test types lines) gives ""; a pipe is read to its end."""
    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (AttributeError, OSError, ValueError):  # no stdin, or none with a descriptor (UnsupportedOperation)
        return ""
    if not (stat.S_ISFIFO(mode) or stat.S_ISREG(mode)):
        return ""
    text = sys.stdin.read().strip()
    try:  # bytes that are not UTF-8 arrive as lone surrogates: said as -f says it, not as the chat API's field
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise HearthError("stdin: not UTF-8 text") from None
    return text


class Words(argparse.Action):
    """PROMPT's words as one prompt, joined by spaces, as `ollama run m why is the sky blue` takes them (the
    second word was "unrecognized arguments"); None when there are none."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, " ".join(values) if values else None)


def model_flag(args: argparse.Namespace) -> None:
    """args.model from MODEL or llama-cli's -m FILE, where MODEL's place then holds the prompt's first word;
    args.prompt from PROMPT, -p PROMPT or -f FILE (one of them)."""
    if args.model_flag is not None:
        words = [w for w in (args.model, args.prompt) if w is not None]
        args.model, args.prompt = args.model_flag, " ".join(words) if words else None
    args.model = args.model or DEFAULT_MODEL
    given = [(flag, text) for flag, text in (("PROMPT", args.prompt), ("-p", args.prompt_flag),
                                              ("-f", _file_text(args.prompt_file))) if text is not None]
    if len(given) > 1:
        raise HearthError(f"{given[0][0]} and {given[1][0]} both give the prompt: give one")
    args.prompt = given[0][1] if given else None


def _file_text(path: str | None) -> str | None:
    return None if path is None else read_text_file("-f", path)
