"""Where a tool call begins, per wire format: the openers that switch a lazy grammar on.

A trigger is a record, not a branch: `text` is what the model writes to open a call (a literal, or
a regex for openers with optional layout), `at_start` says the parser reads it as a call only at the
very start of the output (hermes LEADS: a bare or fenced JSON object), `body` is the shape the rest
of the call must take (tool_guard.grammar turns it into Lark). The first trigger of a format is its
own opener; the others are the wrong-but-common ones small models write instead. Other steps (a
rescue of near-miss calls) register more with `register`."""

from __future__ import annotations

import re
from dataclasses import dataclass

from hearth.tool_parsers import gemma4, harmony

# body kinds: what follows the trigger
TAGGED = "tagged"
"""`<tool_call>` + a whole JSON call object + `</tool_call>`."""
OPEN_OBJECT = "open_object"
"""The trigger opened the call object up to `"name"`; the rest of the object follows."""
FUNCTION_TAG = "function_tag"
"""`<function=` + NAME `>` + the arguments as JSON + `</function>`."""
NAMED = "named"
"""The trigger addressed a message to a function: NAME, the text `between`, the arguments as JSON
(harmony's `to=functions.NAME <|constrain|>json<|message|>{...}`; the call ends the output)."""
GEMMA = "gemma"
"""NAME, then the arguments in Gemma 4's object syntax, then `<tool_call|>` (hearth.tool_parsers.gemma4)."""


@dataclass(frozen=True, slots=True)
class Trigger:
    name: str
    pattern: str
    """A regex (Python's and llguidance's syntax agree on these) for the opener."""
    body: str
    at_start: bool = False
    close: str = ""
    """For OPEN_OBJECT: what closes the call after its object (braces, fence), in Lark."""
    between: str = ""
    """For NAMED: the text between the tool's name and its arguments (one per format)."""

    @property
    def lark(self) -> str:
        return "/" + self.pattern.replace("/", "\\/") + "/"

    def search(self, text: str, pos: int = 0) -> re.Match | None:
        """Where this opener occurs in an output (at its start only, for at_start openers)."""
        rx = re.compile(self.pattern)
        return rx.match(text, pos) if self.at_start else rx.search(text, pos)


_WS = r"[ \t\n]*"
HERMES_TAG = Trigger("tool_call_tag", "<tool_call>", TAGGED)
JSON_OBJECT = Trigger("json_object", f'{_WS}\\{{{_WS}"name"', OPEN_OBJECT, at_start=True, close='"}"')
# Qwen2.5 copies the doubled brace its template shows ({{"name": ...}})
DOUBLED_BRACE = Trigger("doubled_brace", f'{_WS}\\{{\\{{{_WS}"name"', OPEN_OBJECT, at_start=True, close='"}}"')
JSON_FENCE = Trigger("json_fence", f'{_WS}```json{_WS}\\{{{_WS}"name"', OPEN_OBJECT, at_start=True,
                     close='"}" /[ \\t\\n]{0,2}```/')
FUNCTION_EQ = Trigger("function_eq", f"{_WS}<function=", FUNCTION_TAG, at_start=True)
# from the format's record: a call's text around its name, the recipient in the channel (as gpt-oss
# writes most calls) or in the role (as its template writes them back, and the model at times: after a
# message's <|start|>assistant, or first in the output, whose prompt ends with it). A space needs no
# escape (re.escape writes one for verbose mode). Calls in the analysis channel are parsed, not held.
HARMONY_CHANNEL = Trigger("harmony_channel", re.escape(harmony.CALL_TEXT[0]).replace("\\ ", " "), NAMED,
                          between=harmony.CALL_TEXT[1])
HARMONY_ROLE = Trigger("harmony_role", re.escape(harmony.ROLE_CALL_TEXT[0]).replace("\\ ", " "), NAMED,
                       between=harmony.ROLE_CALL_TEXT[1])
HARMONY_ROLE_FIRST = Trigger("harmony_role_first", " ?to=functions\\.", NAMED, at_start=True,
                             between=harmony.ROLE_CALL_TEXT[1])
GEMMA4_CALL = Trigger("gemma4_call", re.escape(gemma4.START + gemma4.CALL), GEMMA)

TRIGGERS: dict[str, list[Trigger]] = {
    "hermes": [HERMES_TAG, JSON_FENCE, DOUBLED_BRACE, JSON_OBJECT, FUNCTION_EQ],
    "qwen_xml": [HERMES_TAG, JSON_FENCE, DOUBLED_BRACE, JSON_OBJECT],
    "bare_json": [JSON_FENCE, DOUBLED_BRACE, JSON_OBJECT],
    "llama3_json": [JSON_FENCE, JSON_OBJECT],
    "harmony": [HARMONY_CHANNEL, HARMONY_ROLE, HARMONY_ROLE_FIRST],
    "gemma4": [GEMMA4_CALL],
}
"""Formats without an entry (mistral: its opener is a special token) get no lazy grammar. harmony's
opener is text (gpt-oss's markers are printed tokens), but its call has no `"name"` key: the decline
gate and the router's early name reading (hearth.tool_guard.declined, name_read) read no name in it."""

ARGUMENTS_KEY = {"llama3_json": "parameters"}
"""The key a format writes the arguments under; "arguments" elsewhere."""


def triggers_for(fmt: str) -> list[Trigger]:
    return list(TRIGGERS.get(fmt, []))


def register(fmt: str, trigger: Trigger) -> None:
    """Add an opener for a format (a hook for steps that parse more call shapes)."""
    TRIGGERS.setdefault(fmt, []).append(trigger)
