"""Flags of llama-server and `vllm serve` that ask for what hearth always does: taken, so a pasted command line
runs, and each one's help says what hearth does (never a flag read and then silently served otherwise). Flags
hearth has no use for are hearth.commands.foreign_flags' one-line errors; flags with a behaviour of their own are
serve's."""

from __future__ import annotations

import argparse

ALREADY: dict[tuple[str, ...], str] = {
    ("--jinja",): "llama-server's: hearth always renders the GGUF's own Jinja chat template (--chat-template and "
                  "--chat-template-file give another)",
    ("--metrics",): "llama-server's: GET /metrics (Prometheus, vLLM's names) is always on",
    ("--no-context-shift",): "llama-server's: hearth never shifts the context; an answer that fills it ends with "
                             "finish_reason length, and a prompt longer than it is a 400",
    ("--enable-chunked-prefill",): "vLLM's: hearth always prefills in chunks within --max-num-batched-tokens",
    ("--trust-remote-code",): "vLLM's: a GGUF carries no code; hearth runs only its own model code",
    ("--disable-log-requests",): "vLLM's: hearth never logs requests' prompts or parameters",
    ("--disable-log-stats",): "vLLM's: hearth logs no periodic stats (GET /metrics has them)",
    ("--enforce-eager",): "vLLM's: hearth runs the model eagerly, without CUDA graphs",
}
"""flag and its spellings -> what hearth does (the flag's help)."""

ALREADY_NAMED: dict[tuple[str, ...], str] = {
    ("--tool-call-parser",): "vLLM's (with --enable-auto-tool-choice): hearth parses tool calls in the format the "
                             "model writes (hermes, Mistral, Llama-3 JSON, Qwen XML, harmony), whatever NAME says",
    ("--reasoning-parser",): "vLLM's: hearth reads <think> and harmony reasoning into reasoning_content itself, "
                             "whatever NAME says",
}
"""The same for flags that take a value, which hearth reads past."""


def add_peer_arguments(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group("other engines' flags that hearth follows already")
    for flags, does in ALREADY.items():
        group.add_argument(*flags, action="store_true", help=does)
    for flags, does in ALREADY_NAMED.items():
        group.add_argument(*flags, metavar="NAME", help=does)
