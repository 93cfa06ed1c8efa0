"""One sentence the guard adds to a tool request's system message so a model writes one call per
thing asked (BFCL's parallel categories): Qwen2.5-Coder writes one call and ends on a request that
asks for several (docs/eval-tools.md, 2026-12-06).

The sentence names the model's own call delimiters, from its format's record (START / END of
hearth.tool_parsers.formats: `<tool_call></tool_call>` for hermes and qwen_xml). A format without a
closing marker (mistral's `[TOOL_CALLS]` list, llama3_json, bare_json) gets no sentence: its several
calls are one region in another shape (a JSON list), and a format-neutral wording is unmeasured
there, so the prompt stays as the template renders it.

Turned on (GuardConfig.parallel_hint: `hearth serve --tool-guard-parallel-hint`, per request
`hearth.tool_guard_parallel_hint`; off by default: it won BFCL parallel items on Qwen2.5-Coder-1.5B
and lost irrelevance items on the 0.5B), it goes only where it can help and cannot contradict the
request: mode `guard`, tools offered, tool_choice not "none" (the plan then has no tools), parallel
calls allowed. Its text depends on nothing but the format, so every turn of a conversation renders
the same system message: the cached prefix is reused."""

from __future__ import annotations

from hearth.tool_parsers import ToolParserError, get_format

KIND = "prompt_instruction"
"""The GuardEvent that reports it (hearth.tool_guard.guard_event)."""
NAME = "parallel_calls"


def parallel_hint(fmt: str | None) -> str | None:
    """The sentence for a call format (None: the format has no delimiters around each call)."""
    if fmt is None:
        return None
    try:
        module = get_format(fmt)
    except ToolParserError:
        return None
    start, end = getattr(module, "START", ""), getattr(module, "END", "")
    if not start or not end:
        return None
    return ("When the request asks for several things, answer with one function call for each of them, "
            f"every call in its own {start}{end} tags.")


def wants_hint(mode: str, enabled: bool, has_tools: bool, parallel: bool) -> bool:
    """Whether a request gets the sentence (has_tools: the plan has tools, so tool_choice is not "none")."""
    return mode == "guard" and enabled and has_tools and parallel


def with_system_text(messages: list[dict], text: str) -> list[dict]:
    """`messages` with `text` appended to the leading system message, or as the system message put
    first where there is none. That replaces what a template writes in its place (Qwen2.5's "You are
    Qwen, created by Alibaba Cloud. ..."), and must: measured on Qwen2.5-Coder-1.5B (LLM.chat, greedy,
    BFCL parallel_0/10/20/30), the sentence alone wrote 2 calls on 3 of 4 items, the sentence after
    Qwen's default text (or before it) on none, as without it (docs/eval-tools.md, 2026-12-06, twelfth
    session). A copy: the caller's list is not changed."""
    if messages and messages[0].get("role") == "system":
        first = messages[0]
        content = first.get("content") or ""
        return [{**first, "content": f"{content}\n\n{text}" if content else text}, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]
