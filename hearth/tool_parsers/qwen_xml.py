"""Qwen3-Coder tool calls: XML inside the hermes tags, one value per parameter, so code arguments
need no JSON escaping:

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

A function body that is a JSON object is the arguments whole. A value is JSON-decoded when it is valid JSON, else kept as a string; where the tool's schema
types the parameter, the schema wins (a `string` stays a string even if it reads `42`). A tag body
that is JSON instead of XML is parsed as hermes JSON."""

from __future__ import annotations

import re
from typing import Any

from hearth.tool_parsers.lenient_json import loads, loads_lenient
from hearth.tool_parsers.rescue import calls_from_json, to_call
from hearth.tool_parsers.types import ToolCall, tool_parameters

START = "<tool_call>"
END = "</tool_call>"
FUNCTION = "<function="
# a missing close tag ends at the next open tag or the end of the region (rescue of cut-off output)
_FUNCTION = re.compile(r"<function=([^>\n]+)>(.*?)(?:</function>|(?=<function=)|\Z)", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^>\n]+)>(.*?)(?:</parameter>|(?=<parameter=)|\Z)", re.DOTALL)


def parse(text: str, tools: list[dict] | None) -> list[ToolCall]:
    """The calls in the text between START and END; ValueError if there are none."""
    if not is_xml(text):
        return calls_from_json(text, tools)
    schemas = tool_parameters(tools)
    calls = []
    for name, body in _FUNCTION.findall(text):
        if body.strip().startswith("{"):  # `<function=NAME>{"city": "Paris"}</function>` (Llama 3.1's form)
            calls.append(to_call({"name": name, "arguments": loads_lenient(body.strip())}, tools))
            continue
        properties = schemas.get(name.strip(), {}).get("properties", {})
        args = {key.strip(): value(raw, properties.get(key.strip()))
                for key, raw in _PARAMETER.findall(body)}
        calls.append(to_call({"name": name, "arguments": args}, tools))
    return calls


def is_open(region: str) -> bool:
    """Whether a region holds XML calls and its last function has no `</function>` (a cut call)."""
    return is_xml(region) and "</function>" not in region[region.rfind(FUNCTION):]


def is_xml(text: str) -> bool:
    """Whether a region holds XML calls (a JSON call may mention `<function=` in a string)."""
    return text.lstrip().startswith(FUNCTION)


def value(raw: str, schema: Any) -> Any:
    """One parameter's value; the template writes a newline on each side of it."""
    text = raw[1:] if raw.startswith("\n") else raw
    text = text[:-1] if text.endswith("\n") else text
    typed = kinds(schema)
    if typed == {"string"}:
        return text
    try:
        return loads(text)  # 1e400 or NaN stays the model's text (the guard's schema check reports it)
    except ValueError:
        pass
    if typed and "string" not in typed:  # typed as non-text: repair True, 'a', trailing commas
        try:
            return loads_lenient(text)
        except ValueError:
            pass
    return text


def kinds(schema: Any) -> set[str]:
    """The JSON types a parameter's schema names (none when it names none)."""
    kind = schema.get("type") if isinstance(schema, dict) else None
    if isinstance(kind, str):
        return {kind}
    return {k for k in kind if isinstance(k, str)} if isinstance(kind, list) else set()
