"""A JSON schema's local `$ref`s (`#`, `#/$defs/point`, any JSON pointer into its own document): listed,
resolved and rewritten, so a part of a schema can go into another document and keep what it refers to.

A forced call's schema puts each tool's arguments schema under `properties.arguments` (in an `anyOf`
branch per tool), where its `#/$defs/...` named nothing: llguidance refused the grammar ("Pointer
'/$defs/Q' does not exist") for any tool whose parameters a pydantic model with a nested model wrote.
hearth.sample.schema_lark embeds a sub-schema as a `%json` document of its own, which needs what its
refs reach beside it."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import unquote

from hearth.sample.schema_bounds import NAMED_SCHEMAS

DATA = frozenset({"const", "enum", "default", "examples"})
"""Keywords whose values are JSON data, not schemas: a `$ref` key there is no reference."""
MISSING = object()
"""What resolve returns for a `$ref` that names nothing in the document (or is not a local pointer)."""


def refs(schema) -> list:
    """Every `$ref`'s value in `schema`, in order (not a string where a schema is malformed); the data of
    `const`, `enum` and the like is no schema and is skipped."""
    found = []
    _walk(schema, lambda ref: found.append(ref) or ref)
    return found


def rewritten(schema, new: Callable[[str], str]):
    """A copy of `schema` whose string `$ref`s are new(ref)."""
    return _walk(schema, lambda ref: new(ref) if isinstance(ref, str) else ref)


def rebased(schema, base: str):
    """`schema` to sit at JSON pointer `base` (`/properties/arguments`) of another document: its local refs
    point there (`#/$defs/Q` becomes `#/properties/arguments/$defs/Q`)."""
    return rewritten(schema, lambda ref: f"#{base}{ref[1:]}" if ref.startswith("#") else ref)


def pointer(*names: str) -> str:
    """A JSON pointer to the member `names` (`~` and `/` escaped)."""
    return "".join("/" + n.replace("~", "~0").replace("/", "~1") for n in names)


def resolve(root, ref):
    """What a local `$ref` (`#` or `#/a/b`, percent-encoded as a URI fragment may be) names in `root`, or MISSING."""
    if not isinstance(ref, str) or not (ref == "#" or ref.startswith("#/")):
        return MISSING
    node = root
    for token in ref[2:].split("/") if ref != "#" else []:
        token = unquote(token).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return MISSING
    return node


def _walk(schema, on_ref: Callable):
    """A copy of `schema` with each `$ref`'s value replaced by on_ref(value)."""
    if isinstance(schema, list):
        return [_walk(s, on_ref) for s in schema]
    if not isinstance(schema, dict):
        return schema
    return {k: on_ref(v) if k == "$ref" else v if k in DATA else
            {name: _walk(s, on_ref) for name, s in v.items()} if k in NAMED_SCHEMAS and isinstance(v, dict) else
            _walk(v, on_ref) for k, v in schema.items()}
