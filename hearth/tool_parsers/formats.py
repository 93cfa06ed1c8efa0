"""The registry of tool-call wire formats, and which one a chat template speaks.

A format is a module with three names (the mlx-lm tool_parsers protocol): `START` and `END`, the
markers around a call region (END "" = the region runs to the next START or the end of the
output; START "" = no marker, see LEADS), and `parse(text, tools) -> list[ToolCall]`, which gets
the text between the markers and raises ValueError (or returns []) when it holds no call. A format
may add `LEADS`: openings that make an output which starts with them one whole call region (Llama 3
custom tools and bare JSON have no marker). harmony's record adds more: `Stream`, a streaming parser
of the whole output, its channels as well as its calls, which then parses in place of the machine of
hearth.tool_parsers.stream, with or without tools (detect_channels); `SIGNATURE`, how its templates
are known; `CALL_TEXT`, a call's text around its name (forced and lazy call grammars); and
`history(messages, template_source)`, the chat history laid out as its template reads it
(hearth.api.chat_template; gemma4 has one too).
A format whose calls are not JSON adds `is_open(region)`: a region max_tokens cut inside a call
(hearth.tool_parsers.cut)."""

from __future__ import annotations

from types import ModuleType

from hearth.tool_parsers import bare_json, gemma4, harmony, hermes, llama3_json, mistral, qwen_xml
from hearth.tool_parsers.types import ToolParserError

FORMATS: dict[str, ModuleType] = {
    "hermes": hermes,
    "mistral": mistral,
    "llama3_json": llama3_json,
    "qwen_xml": qwen_xml,
    "bare_json": bare_json,
    "harmony": harmony,
    "gemma4": gemma4,
}

# First match wins. harmony's channel marker is its own. Qwen3-Coder templates also write <tool_call>,
# so <function= comes first; Llama 3.2's template writes custom calls as '"parameters": ' without the python tag.
_SIGNATURES = (
    (harmony.SIGNATURE, "harmony"),
    (gemma4.START, "gemma4"),
    ("<function=", "qwen_xml"),
    ("[TOOL_CALLS]", "mistral"),
    ("<tool_call>", "hermes"),
    ("<|python_tag|>", "llama3_json"),
    ('"parameters"', "llama3_json"),
)


def get_format(name: str) -> ModuleType:
    """The module for a format name (as a user would give it to --tool-parser)."""
    try:
        return FORMATS[name]
    except KeyError:
        raise ToolParserError(
            f"unknown tool-call format {name!r}; known: {', '.join(sorted(FORMATS))}") from None


def detect_format(template_source: str | None) -> str | None:
    """The format a chat template teaches its model, by the markers the template writes; None when
    it shows none (the server may then prompt with tools_system_prompt and parse hermes)."""
    if not template_source:
        return None
    return next((fmt for needle, fmt in _SIGNATURES if needle in template_source), None)


def detect_channels(template_source: str | None) -> str | None:
    """The format whose record parses a model's whole output (`Stream`: reasoning and content channels
    as well as calls), when the template teaches one; a request without tools needs it too."""
    fmt = detect_format(template_source)
    return fmt if fmt is not None and hasattr(FORMATS[fmt], "Stream") else None
