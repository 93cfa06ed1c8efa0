"""A text answer that shows the user a command of an offered tool instead of calling it: asked "Use
grep to find the function in the script" with a `grep` tool offered, Qwen2.5-Coder-1.5B explains
```sh grep -r "def" your_script.py``` (BFCL multi-turn). The guard re-prompts once, asking for the
call (hearth.api.guarded); the model may still answer in text (the user may have asked how to run it).

Only code blocks count: a line of a fenced block that starts with an offered tool's name as a shell
command (`grep -r ...`, `$ ls`) or as a call (`get_weather(city="Paris")`). A name in prose, or a
Python line that assigns to it (`ls = []`), is not a command."""

from __future__ import annotations

import re

from hearth.tool_guard.checks import Problem

DESCRIBED_CALL = "described_call"
_FENCE = re.compile(r"```[^\n`]*\n(.*?)```", re.DOTALL)
_COMMAND = re.compile(r"\s*(?:\$\s*)?([A-Za-z_][\w.\-]*)(\(|\s+(?![=:+\-*/%.<>!]=?\s)|$)")


def described_tools(text: str, tool_names: list[str]) -> list[str]:
    """The offered tools that `text`'s code blocks run as commands, in order of first use."""
    names, found = set(tool_names), []
    for block in _FENCE.finditer(text):
        for line in block.group(1).splitlines():
            m = _COMMAND.match(line)
            if m and m.group(1) in names and m.group(1) not in found:
                found.append(m.group(1))
    return found


def described(text: str, tool_names: list[str]) -> Problem | None:
    tools = described_tools(text, tool_names)
    if not tools:
        return None
    return Problem(DESCRIBED_CALL, f"the answer shows a command of {', '.join(tools)} instead of calling it; "
                   f"{'it is a tool' if len(tools) == 1 else 'they are tools'} you can call yourself")
