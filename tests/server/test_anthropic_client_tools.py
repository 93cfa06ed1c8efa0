"""Anthropic-defined client tools (a type and a name, no input_schema) take the input schema their type
documents (hearth.api.anthropic_client_tools): the model sees their parameters in its prompt."""

from __future__ import annotations

import pytest

from hearth.api.anthropic_client_tools import CLIENT_TOOLS, client_tool
from hearth.api.tools import anthropic_tools

MESSAGES = "/v1/messages"
USER = [{"role": "user", "content": "hi"}]
BASH = {"type": "bash_20250124", "name": "bash"}
EDITOR = {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool", "max_characters": 10000}
COMPUTER = {"type": "computer_20250124", "name": "computer", "display_width_px": 1024, "display_height_px": 768}


def test_the_prompt_names_each_client_tools_parameters(fake):
    r = fake.client.post(MESSAGES, json={"max_tokens": 2, "messages": USER, "tools": [BASH, EDITOR, COMPUTER]})
    assert r.status_code == 200, r.text
    prompt = fake.engine.added[-1].prompt
    for name in ("restart", "path", "old_str", "new_str", "insert_line", "view_range", "file_text",
                 "scroll_direction", "start_coordinate", "left_click"):
        assert f'"{name}"' in prompt, name
    assert "undo_edit" not in prompt  # 20250728 dropped it
    assert "max_characters" not in prompt  # a tool option the client applies, not an input


@pytest.mark.parametrize("kind,commands", [
    ("text_editor_20241022", ["view", "create", "str_replace", "insert", "undo_edit"]),
    ("text_editor_20250124", ["view", "create", "str_replace", "insert", "undo_edit"]),
    ("text_editor_20250429", ["view", "create", "str_replace", "insert"]),
    ("text_editor_20250728", ["view", "create", "str_replace", "insert"]),
])
def test_each_editor_version_has_its_documented_commands(kind, commands):
    schema = client_tool(kind).input_schema
    assert schema["properties"]["command"]["enum"] == commands and schema["required"] == ["command", "path"]


def test_bash_requires_nothing_as_restart_goes_without_a_command():
    assert client_tool("bash_20250124").input_schema["required"] == []


@pytest.mark.parametrize("kind,like", [
    ("bash_20260101", "bash_20250124"),
    ("text_editor_20261231", "text_editor_20250728"),
    ("computer_20260101", "computer_20251124"),
])
def test_another_version_of_a_known_family_takes_its_latest(kind, like):
    assert client_tool(kind) is CLIENT_TOOLS[like]


@pytest.mark.parametrize("kind", ["memory_20250818", "bash", "bash_2025", "xbash_20250124"])
def test_an_unknown_type_keeps_an_empty_schema(kind):
    tool = anthropic_tools([{"type": kind, "name": "t"}])[0]["function"]
    assert tool["parameters"] == {"type": "object"} and tool["description"] == ""


def test_a_type_that_is_no_string_is_no_client_tool():
    assert client_tool(None) is None and client_tool(["bash_20250124"]) is None


def test_a_request_gets_a_copy_of_the_schema():
    anthropic_tools([BASH])[0]["function"]["parameters"]["properties"].clear()
    assert anthropic_tools([BASH])[0]["function"]["parameters"]["properties"]


def test_a_clients_own_description_and_schema_win():
    schema = {"type": "object", "properties": {"cmd": {"type": "string"}}}
    fn = anthropic_tools([{**BASH, "description": "mine", "input_schema": schema}])[0]["function"]
    assert fn["description"] == "mine" and fn["parameters"] == schema


def test_the_model_is_told_the_computer_tool_s_screen():
    """The definition carries display_width_px / display_height_px (and display_number), and the model
    was told none of it: it clicked at coordinates of a screen it guessed. As Anthropic's definition of
    the tool tells Claude, the description says the resolution, and the points' descriptions their bounds."""
    fn = anthropic_tools([{**COMPUTER, "display_number": 1}])[0]["function"]
    assert "The screen's resolution is 1024x768 pixels: x from 0 to 1023, y from 0 to 767." in fn["description"]
    assert "The display number is 1." in fn["description"]
    props = fn["parameters"]["properties"]
    assert "The screen is 1024x768" in props["coordinate"]["description"]
    assert "The screen is 1024x768" in props["start_coordinate"]["description"]
    assert "1024" not in client_tool(COMPUTER["type"]).description  # the registry's record stays as it was
    assert "1024" not in str(client_tool(COMPUTER["type"]).input_schema)
    bare = anthropic_tools([{"type": "computer_20250124", "name": "computer"}])[0]["function"]
    assert "resolution" not in bare["description"] and "display number" not in bare["description"]


def test_the_screen_reaches_the_prompt(fake):
    r = fake.client.post(MESSAGES, json={"max_tokens": 2, "messages": USER, "tools": [COMPUTER]})
    assert r.status_code == 200, r.text
    assert "1024x768" in fake.engine.added[-1].prompt


@pytest.mark.parametrize("field,value", [("display_width_px", 0), ("display_height_px", "768"),
                                         ("display_number", -1), ("display_width_px", True)])
def test_a_bad_screen_field_is_a_400_naming_it(fake, field, value):
    r = fake.client.post(MESSAGES, json={"max_tokens": 2, "messages": USER, "tools": [{**COMPUTER, field: value}]})
    assert r.status_code == 400, r.text
    assert f"tools[0].{field}: must be an integer of at least" in r.json()["error"]["message"]
