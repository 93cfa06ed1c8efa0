"""Anthropic-defined client tools ({"type": "bash_20250124", "name": "bash"}: a type and a name, no
input_schema) -> the input schema and description Anthropic documents for the type, so a local model
sees the tool's parameters and the tool guard can validate and constrain its calls.

One record per type version, from Anthropic's tool docs (bash, text editor and computer use tool
pages; the anthropic SDKs' Beta*Input models for computer_20251124's zoom). Another version of a
known family (bash_20260101) takes the family's latest record; an unknown family has none. A computer
tool's definition also carries its screen (display_width_px, display_height_px, display_number): the
model is told it in the description, as Anthropic's definition of the tool tells Claude ("The screen's
resolution is WxH"), and the coordinates' descriptions name their bounds."""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass


class ClientToolError(ValueError):
    """A field of a client tool's definition that is out of range; `field` names it."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True, slots=True)
class ClientTool:
    description: str
    input_schema: dict
    screen: bool = False
    """The definition carries a screen (the computer tools): said in what the model sees (definition())."""

    def definition(self, tool: dict) -> tuple[str, dict]:
        """(description, input schema) the model sees for a request's definition `tool`: copies, so a
        request never edits the registry's."""
        schema = copy.deepcopy(self.input_schema)
        return self.description + (_screen(tool, schema) if self.screen else ""), schema


def _object(properties: dict, required: list[str]) -> dict:
    # additionalProperties false: the docs list every input a version takes, so the guard refuses others
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def _ints(n: int, what: str) -> dict:
    return {"type": "array", "items": {"type": "integer"}, "minItems": n, "maxItems": n, "description": what}


# bash: `command` is required unless `restart` is true, so neither is required (the docs' own note)
_BASH = ClientTool(
    "Run a command in a persistent bash session; restart the session with restart: true.",
    _object({"command": {"type": "string", "description": "The bash command to run (omit when restarting)."},
             "restart": {"type": "boolean", "description": "true restarts the bash session."}}, []))


def _editor(commands: list[str]) -> ClientTool:
    return ClientTool(
        "View, create and edit text files: view a file or directory, create a file, replace an exact string, "
        "insert text after a line" + (", undo the last edit." if "undo_edit" in commands else "."),
        _object({
            "command": {"type": "string", "enum": commands, "description": "The command to run."},
            "path": {"type": "string", "description": "Path of the file or directory."},
            "file_text": {"type": "string", "description": "create: the new file's content."},
            "old_str": {"type": "string", "description": "str_replace: the exact text to replace, found once."},
            "new_str": {"type": "string", "description": "str_replace: the replacement; insert: the text to insert."},
            "insert_line": {"type": "integer", "description": "insert: the line after which to insert (0: the start)."},
            "view_range": _ints(2, "view: [first, last] line, 1-based; last -1 reads to the end."),
        }, ["command", "path"]))


# the Claude 4 editors (20250429, 20250728) dropped undo_edit; 20250728's max_characters is a tool
# option the client sets, not an input
_EDITOR_UNDO = _editor(["view", "create", "str_replace", "insert", "undo_edit"])
_EDITOR = _editor(["view", "create", "str_replace", "insert"])

_ACTIONS_20241022 = ["key", "type", "mouse_move", "left_click", "left_click_drag", "right_click", "middle_click",
                     "double_click", "screenshot", "cursor_position"]
_ACTIONS_20250124 = _ACTIONS_20241022 + ["scroll", "hold_key", "wait", "triple_click", "left_mouse_down",
                                         "left_mouse_up"]
_XY = _ints(2, "[x, y] in pixels from the screen's top left.")


def _computer(actions: list[str], extra: dict) -> ClientTool:
    return ClientTool(
        "Control a computer's screen, mouse and keyboard: take screenshots, move and click, type and press keys.",
        _object({"action": {"type": "string", "enum": actions, "description": "The action to perform."},
                 "coordinate": _XY,
                 "text": {"type": "string",
                          "description": "type: the text to type; key: the key or combination (xdotool syntax)."},
                 **extra}, ["action"]), screen=True)


SCREEN = {"display_width_px": 1, "display_height_px": 1, "display_number": 0}
"""A computer tool's screen fields and their least values (Anthropic's docs: the width and height in
pixels, the X11 display number)."""
_POINTS = ("coordinate", "start_coordinate")  # inputs that are [x, y] on the screen


def _screen(tool: dict, schema: dict) -> str:
    """The sentences on the screen a computer tool's definition gives, its points' bounds written into
    `schema`; "" where it gives none."""
    for key, least in SCREEN.items():
        v = tool.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < least):
            raise ClientToolError(key, f"must be an integer of at least {least}, not {v!r}")
    w, h, n = (tool.get(k) for k in SCREEN)
    text = ""
    if w is not None and h is not None:
        text = f" The screen's resolution is {w}x{h} pixels: x from 0 to {w - 1}, y from 0 to {h - 1}."
        for name in _POINTS:
            if name in schema["properties"]:
                point = schema["properties"][name]
                point["description"] += f" The screen is {w}x{h}: x below {w}, y below {h}."
    if n is not None:
        text += f" The display number is {n}."
    return text


_COMPUTER_20250124_INPUTS = {
    "start_coordinate": {**_XY, "description": "left_click_drag: the [x, y] the drag starts from."},
    "scroll_direction": {"type": "string", "enum": ["up", "down", "left", "right"],
                         "description": "scroll: which way."},
    "scroll_amount": {"type": "integer", "description": "scroll: the number of wheel clicks."},
    "duration": {"type": "number", "description": "hold_key and wait: seconds."},
}

CLIENT_TOOLS: dict[str, ClientTool] = {
    "bash_20241022": _BASH,
    "bash_20250124": _BASH,
    "text_editor_20241022": _EDITOR_UNDO,
    "text_editor_20250124": _EDITOR_UNDO,
    "text_editor_20250429": _EDITOR,
    "text_editor_20250728": _EDITOR,
    "computer_20241022": _computer(_ACTIONS_20241022, {}),
    "computer_20250124": _computer(_ACTIONS_20250124, _COMPUTER_20250124_INPUTS),
    "computer_20251124": _computer(_ACTIONS_20250124 + ["zoom"], {
        **_COMPUTER_20250124_INPUTS, "region": _ints(4, "zoom: [x0, y0, x1, y1], the region to view at full size.")}),
}
"""Anthropic's client tool type -> its record."""

_VERSIONED = re.compile(r"(.+)_(\d{8})")  # family_YYYYMMDD
_LATEST = {_VERSIONED.fullmatch(k)[1]: CLIENT_TOOLS[k] for k in sorted(CLIENT_TOOLS)}
"""family -> the record of its latest known version (sorted: the last date wins)."""


def client_tool(kind: str | None) -> ClientTool | None:
    """The record of an Anthropic client tool type: its own, else its family's latest; None if unknown."""
    if not isinstance(kind, str):  # a list or object (a bad request) is no key
        return None
    m = _VERSIONED.fullmatch(kind)
    return CLIENT_TOOLS.get(kind) or (_LATEST.get(m[1]) if m else None)
