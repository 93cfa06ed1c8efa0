"""Arguments against their schema: each rule, the safe coercions (made and reported) and the unsafe
ones (refused); and the problems check_calls finds in an attempt."""

from __future__ import annotations

import json

import pytest

from hearth.tool_guard import check_arguments, check_calls
from hearth.tool_parsers import ToolCall

SCHEMA = {"type": "object", "required": ["city"], "additionalProperties": False, "properties": {
    "city": {"type": "string"},
    "days": {"type": "integer"},
    "temp": {"type": "number"},
    "unit": {"enum": ["c", "f"]},
    "tags": {"type": "array", "items": {"type": "string"}},
    "opt": {"type": ["string", "null"]},
    "where": {"type": "object", "properties": {"lat": {"type": "number"}}, "required": ["lat"]},
    "either": {"anyOf": [{"type": "boolean"}, {"type": "integer"}]},
}}


@pytest.mark.parametrize("args,errors", [
    ({"city": "Oslo"}, []),
    ({"city": "Oslo", "days": 3, "temp": 2, "unit": "c", "tags": ["a"], "opt": None, "where": {"lat": 1.5}}, []),
    ({}, ["arguments: missing required property 'city'"]),
    ({"city": 3}, ["arguments.city: expected string, got integer 3"]),
    ({"city": "Oslo", "days": 2.5}, ["arguments.days: expected integer, got number 2.5"]),
    ({"city": "Oslo", "days": True}, ["arguments.days: expected integer, got boolean true"]),
    ({"city": "Oslo", "unit": "k"}, ['arguments.unit: "k" is not one of ["c", "f"]']),
    ({"city": "Oslo", "town": "x"}, ["arguments: unexpected property 'town' (allowed: city, days, temp, unit, tags, "
                                     "opt, where, either)"]),
    ({"city": "Oslo", "tags": ["a", 1]}, ["arguments.tags[1]: expected string, got integer 1"]),
    ({"city": "Oslo", "where": {}}, ["arguments.where: missing required property 'lat'"]),
    ({"city": "Oslo", "either": "x"}, ["arguments.either: matches none of the 2 allowed shapes"]),
])
def test_rules(args, errors):
    verdict = check_arguments(json.dumps(args), SCHEMA)
    assert verdict.errors == errors and not verdict.coercions


@pytest.mark.parametrize("args,fixed,coerced", [
    ({"city": "Oslo", "days": "10"}, {"city": "Oslo", "days": 10}, [("arguments.days", "10", 10)]),
    ({"city": "Oslo", "days": 3.0}, {"city": "Oslo", "days": 3}, [("arguments.days", 3.0, 3)]),
    ({"city": "Oslo", "temp": "2.5"}, {"city": "Oslo", "temp": 2.5}, [("arguments.temp", "2.5", 2.5)]),
    ({"city": "Oslo", "where": {"lat": "-3"}}, {"city": "Oslo", "where": {"lat": -3}}, [("arguments.where.lat", "-3", -3)]),
    ({"city": "Oslo", "either": "7"}, {"city": "Oslo", "either": 7}, [("arguments.either", "7", 7)]),
])
def test_safe_coercions_are_made_and_reported(args, fixed, coerced):
    verdict = check_arguments(json.dumps(args), SCHEMA)
    assert verdict.ok and verdict.value == fixed
    assert [(c.path, c.was, c.now) for c in verdict.coercions] == coerced


@pytest.mark.parametrize("value", ["ten", "1e400x", "0x10", "", " 1 2", "1e400", "-1e400"])
def test_unsafe_values_are_not_coerced(value):
    for key in ("days", "temp"):  # "1e400" as a number is Infinity, which is not JSON
        verdict = check_arguments(json.dumps({"city": "Oslo", key: value}), SCHEMA)
        assert not verdict.ok and not verdict.coercions, key


def test_arguments_that_are_not_an_object():
    assert check_arguments("[1]", SCHEMA).errors == ["arguments must be a JSON object"]
    assert check_arguments("{bad", SCHEMA).errors[0].startswith("arguments are not JSON")
    for number in ("1e400", "-1e400", "NaN", "Infinity"):  # json.loads reads them; JSON has no such value
        assert check_arguments(f'{{"city": "Oslo", "days": {number}}}', SCHEMA).errors[0].startswith("arguments are not JSON")
    assert check_arguments("", {}).ok  # no arguments: an empty object


def test_check_calls_finds_each_problem():
    schemas = {"get_weather": SCHEMA}
    good = ToolCall("a", "get_weather", '{"city": "Oslo", "days": "2"}')
    checked = check_calls([good], schemas, required=False)
    assert checked.ok and json.loads(checked.calls[0].arguments) == {"city": "Oslo", "days": 2}
    assert checked.calls[0].id == "a" and checked.coercions[0][0] == 0
    checked = check_calls([ToolCall("b", "get_wether", "{}"), ToolCall("c", "get_weather", "{}")], schemas, False)
    assert [p.kind for p in checked.problems] == ["unknown_tool", "invalid_arguments"]
    assert "the tools are: get_weather" in checked.problems[0].message
    assert [p.kind for p in check_calls([], schemas, required=True).problems] == ["no_call"]
    assert check_calls([], schemas, required=False).ok


def test_only_declared_parameters_at_the_top():
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    echoed = {"type": "object", "properties": {}, "required": []}  # a small model's echo of the schema
    assert check_arguments(json.dumps(echoed), {"type": "object", "properties": {}, "required": []}).errors == [
        "arguments: unexpected property 'type' (allowed: none)", "arguments: unexpected property 'properties' "
        "(allowed: none)", "arguments: unexpected property 'required' (allowed: none)"]
    assert not check_arguments('{"city": "Oslo", "x": 1}', schema).ok
    assert check_arguments('{"city": "Oslo", "x": 1}', {**schema, "additionalProperties": True}).ok
    assert check_arguments('{"x": 1}', {"type": "object"}).ok  # lists no parameters: anything goes
    nested = {"type": "object", "properties": {"o": {"type": "object", "properties": {"a": {}}}}}
    assert check_arguments('{"o": {"a": 1, "b": 2}}', nested).ok  # below the top, JSON Schema's default
