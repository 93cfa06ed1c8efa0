"""BFCL function docs -> OpenAI tools, the way BFCL offers them to function-calling models: type
names mapped to JSON Schema's (BFCL's `dict` -> object, `float` -> number, `tuple` -> array, an
unknown or missing type -> string), the top level an object, and "." in a name replaced by "_"
(OpenAI's names are ^[a-zA-Z0-9_-]{1,64}$). The scorer sees the original names again through
`ToolSet.original`."""

from __future__ import annotations

import copy
from dataclasses import dataclass

JSON_TYPES = {
    "integer": "integer", "number": "number", "float": "number", "double": "number", "string": "string",
    "boolean": "boolean", "bool": "boolean", "array": "array", "list": "array", "tuple": "array",
    "dict": "object", "object": "object", "any": "string", "byte": "integer", "short": "integer",
    "long": "integer", "char": "string",
}


@dataclass(slots=True)
class ToolSet:
    tools: list[dict]
    """OpenAI `tools`, as sent."""
    original: dict[str, str]
    """Offered name -> BFCL's name."""

    def schema(self, offered: str) -> dict | None:
        for t in self.tools:
            if t["function"]["name"] == offered:
                return t["function"]["parameters"]
        return None


def offered_name(name: str) -> str:
    return name.replace(".", "_")


def to_tools(functions: list[dict]) -> ToolSet:
    tools, original = [], {}
    for doc in functions:
        fn = copy.deepcopy(doc)
        fn.pop("response", None)  # multi-turn docs describe the return value; not part of a tool
        fn["name"] = offered_name(doc["name"])
        params = fn.get("parameters") or {}
        params["type"] = "object"
        params["properties"] = {k: _schema(v) for k, v in (params.get("properties") or {}).items()}
        fn["parameters"] = params
        tools.append({"type": "function", "function": fn})
        original[fn["name"]] = doc["name"]
    return ToolSet(tools, original)


def _schema(s: dict) -> dict:
    s = dict(s)
    s["type"] = JSON_TYPES.get(s.get("type", "string"), "string")
    if "properties" in s:
        s["properties"] = {k: _schema(v) for k, v in s["properties"].items()}
    if isinstance(s.get("items"), dict):
        s["items"] = _schema(s["items"])
    return s
