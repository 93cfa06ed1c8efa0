"""--threads (-t) as hearth's commands read it: a number of CPU threads, 0 for torch's default, and
llama.cpp's -1, its default (every physical core: its cpu_get_num_math), read as that same 0, so a pasted
`llama-server -t -1` line runs. Any other negative count stays the engine's one-line error."""

from __future__ import annotations

import argparse

from hearth.config import THREADS_ZERO

LLAMA_DEFAULT = -1
"""llama.cpp's -t default: "use every core" (common/arg.cpp), hearth's 0."""

THREADS_HELP = f"{THREADS_ZERO}; -1: llama.cpp's spelling of the same"


def thread_count(text: str) -> int:
    """argparse type of --threads: llama.cpp's -1 is hearth's 0; other values as int() reads them."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number of threads, not {text!r}") from None
    return 0 if n == LLAMA_DEFAULT else n
