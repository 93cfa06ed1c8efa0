"""An object schema naming its properties, without additionalProperties (a pydantic model's), takes
only those, as llama.cpp (Ollama's `format`) and xgrammar (vLLM) read it: SmolLM2 answered Ollama's
`format=Pet.model_json_schema()` with `{"name":...,"age":20,"description":{...` to the token limit."""

from __future__ import annotations

import pytest

from hearth.sample.grammar import GrammarCompiler
from hearth.sample.schema_closed import closed_objects
from hearth.sampling_params import StructuredOutput
from tests.tool_guard.tiny_vocab import TinyTokenizer

TOK = TinyTokenizer()
COMPILER = GrammarCompiler(TOK, TOK.vocab_size)
PET = {"title": "Pet", "type": "object", "required": ["name", "age"],
       "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}}


def accepts(schema: dict, text: str) -> bool:
    m = COMPILER.matcher(StructuredOutput(json_schema=schema))
    if not all(m.accept(t) for t in TOK.encode(text)):
        return False
    mask = m.bitmask()
    return int.from_bytes(mask[4 * (TOK.eos_id // 32):4 * (TOK.eos_id // 32) + 4], "little") >> (TOK.eos_id % 32) & 1


def test_a_pydantic_models_schema_takes_only_its_properties():
    assert accepts(PET, '{"name":"Rex","age":3}')
    assert not accepts(PET, '{"name":"Rex","age":3,"x":1}')
    nested = {"type": "object", "properties": {"pets": {"type": "array", "items": PET}}}
    assert accepts(nested, '{"pets":[{"name":"a","age":1}]}')
    assert not accepts(nested, '{"pets":[{"name":"a","age":1,"b":2}]}')
    assert not accepts(nested, '{"pets":[],"more":1}')


@pytest.mark.parametrize("schema,text", [
    ({**PET, "additionalProperties": True}, '{"name":"Rex","age":3,"x":1}'),
    ({**PET, "additionalProperties": {"type": "integer"}}, '{"name":"Rex","age":3,"x":1}'),
    ({"type": "object"}, '{"x":1}'),  # no properties named: any object, as llama.cpp reads it
    ({"allOf": [{"properties": {"a": {"type": "integer"}}}, {"properties": {"b": {"type": "integer"}}}]},
     '{"a":1,"b":2}'),
])
def test_a_schema_that_says_what_else_it_takes_is_left_as_given(schema, text):
    assert accepts(schema, text)


def test_names_and_data_are_not_schemas():
    schema = {"type": "object", "properties": {"properties": {"const": {"properties": {}}}}}
    assert closed_objects(schema) == {**schema, "additionalProperties": False}
