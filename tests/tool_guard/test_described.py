"""hearth.tool_guard.described: a text answer that shows a command of an offered tool."""

from __future__ import annotations

import pytest

from hearth.tool_guard.described import DESCRIBED_CALL, described, described_tools

TOOLS = ["grep", "ls", "cd", "get_weather"]

# answer -> the offered tools it shows as commands
CASES = [
    ('To find it, run:\n\n```sh\ngrep -r "def" your_script.py\n```\n\nThe output lists them.', ["grep"]),
    ("```bash\n$ ls -la\n$ cd src && grep main *.py\n```", ["ls", "cd"]),
    ("```\nls\n```", ["ls"]),
    ('Call it like this:\n```python\nget_weather(city="Paris")\n```', ["get_weather"]),
    ("Use `grep` for that: it searches files.", []),                   # a name in prose is no command
    ("```python\nls = []\nls += [1]\ncd: int = 2\n```", []),           # Python that assigns to the name
    ('```sh\nfind . -name "*.py"\n```', []),                            # a command of no offered tool
    ("```\ngrep: no such file\n```", []),                               # output, not a command
    ("The directory has deploy.py.", []),
]


@pytest.mark.parametrize("text,tools", CASES)
def test_commands_of_offered_tools_in_code_blocks(text, tools):
    assert described_tools(text, TOOLS) == tools


def test_the_problem_names_the_tools():
    problem = described(CASES[1][0], TOOLS)
    assert problem.kind == DESCRIBED_CALL and problem.call is None
    assert "a command of ls, cd instead of calling it; they are tools" in problem.message
    assert "it is a tool" in described(CASES[0][0], TOOLS).message
    assert described("Use grep.", TOOLS) is None and described(CASES[0][0], []) is None
