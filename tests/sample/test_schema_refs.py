"""A schema's local `$ref`s are listed, resolved and moved with it (hearth.sample.schema_refs): a forced
call's arguments keep what their refs name once they stand under the call object."""

from __future__ import annotations

import pytest

from hearth.sample.schema_refs import MISSING, pointer, rebased, refs, resolve

SCHEMA = {"$defs": {"a/b": {"type": "number"}, "c~d": {"$ref": "#/$defs/a~1b"}}, "type": "object", "properties": {
    "$ref": {"$ref": "#/$defs/c~0d"},  # a property named $ref: its value is a schema
    "n": {"not": {"$ref": "#"}},  # `not` holds a schema (schema_bounds leaves it as given, for bounds only)
    "k": {"const": {"$ref": "#/nowhere"}, "default": {"$ref": "#/nowhere"}},  # data, no reference
    "l": {"items": [{"$ref": "#/properties/n"}]}}}


def test_refs_are_the_schemas_not_the_datas():
    assert refs(SCHEMA) == ["#/$defs/a~1b", "#/$defs/c~0d", "#", "#/properties/n"]


@pytest.mark.parametrize("ref, want", [
    ("#", SCHEMA), ("#/$defs/a~1b", {"type": "number"}), ("#/$defs/c~0d", {"$ref": "#/$defs/a~1b"}),
    ("#/properties/l/items/0", {"$ref": "#/properties/n"}), ("#/%24defs/a~1b", {"type": "number"}),
    ("#/$defs/a/b", MISSING), ("#/properties/l/items/1", MISSING), ("https://example.com/s.json", MISSING),
    ("#point", MISSING), (None, MISSING),
])
def test_resolve_follows_a_json_pointer(ref, want):
    assert resolve(SCHEMA, ref) == want if want is not MISSING else resolve(SCHEMA, ref) is MISSING


def test_rebased_refs_name_the_same_schemas_where_the_schema_now_stands():
    base = pointer("anyOf", "0", "properties", "arg/s")
    moved = rebased(SCHEMA, base)
    outer = {"anyOf": [{"properties": {"arg/s": moved}}]}
    assert [resolve(outer, r) for r in refs(moved)] == [rebased(resolve(SCHEMA, r), base) for r in refs(SCHEMA)]
    assert moved["properties"]["k"] == SCHEMA["properties"]["k"]  # data untouched
    assert rebased({"$ref": "https://example.com/s.json"}, base) == {"$ref": "https://example.com/s.json"}


def test_a_call_grammar_compiles_with_a_ref_inside_not():
    """`not` holds a schema (lenient tool grammars leave it to the guard): its ref goes with its %json."""
    from hearth.sample.grammar import compile_grammar
    from hearth.sampling_params import StructuredOutput
    from hearth.tool_guard.grammar import lazy_tool_grammar
    from hearth.tool_parsers import call_constraint
    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "$defs": {"s": {"type": "string"}}, "type": "object",
        "properties": {"x": {"type": "number"}, "y": {"not": {"$ref": "#/$defs/s"}}}}}}]
    for lark in (call_constraint("hermes", tools, "required").lark(), lazy_tool_grammar("hermes", tools)):
        assert "JSON_NUMBER" in lark and compile_grammar(StructuredOutput(grammar=lark))
