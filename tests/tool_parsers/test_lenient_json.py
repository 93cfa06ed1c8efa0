"""Near-JSON as models write it is repaired; valid JSON is read as json.loads reads it."""

from __future__ import annotations

import json

import pytest

from hearth.tool_parsers.lenient_json import json_values, loads_lenient, split_values

REPAIRS = [
    ('{"a": 1}', {"a": 1}),
    ('```json\n{"a": 1}\n```', {"a": 1}),
    ('```\n{"a": 1}', {"a": 1}),
    ('{"a": [1, 2,], "b": {"c": 3,},}', {"a": [1, 2], "b": {"c": 3}}),
    ("{'a': 'it\\'s', 'b': \"say \\\"hi\\\"\"}", {"a": "it's", "b": 'say "hi"'}),
    ("{'q': 'He said \"no\"'}", {"q": 'He said "no"'}),
    ('{"t": True, "f": False, "n": None}', {"t": True, "f": False, "n": None}),
    ('{"s": "True stays text"}', {"s": "True stays text"}),
    ("{name: 'f', arguments: {x: 1}}", {"name": "f", "arguments": {"x": 1}}),
    ('{"a": {"b": [1, 2', {"a": {"b": [1, 2]}}),
    ('{"a": "cut', {"a": "cut"}),
    ('{"a": 1,', {"a": 1}),
    ('{"a": "line\nbreak"}', {"a": "line\nbreak"}),
    ('{"a": "\\u00e9", "b": 1e3}', {"a": "é", "b": 1000.0}),
    ('{"a": "ends in backslash\\', {"a": "ends in backslash"}),
]


@pytest.mark.parametrize("text, value", REPAIRS)
def test_loads_lenient(text, value):
    assert loads_lenient(text) == value


@pytest.mark.parametrize("text", ['{"a": 1e400}', '{"a": -1e400}', '{"a": NaN}', '{"a": Infinity}', "[-Infinity]",
                                  "{'a': 1E+999,}"])
def test_numbers_json_cannot_carry_are_refused(text):
    """json.dumps writes them back as Infinity or NaN, which is not JSON (a strict client fails on it)."""
    with pytest.raises(ValueError):
        loads_lenient(text)


def test_numbers_a_double_holds_are_read():
    assert loads_lenient('{"a": 1e308, "b": 1e-400, "c": 123456789012345678901234567890}') == {
        "a": 1e308, "b": 0.0, "c": 123456789012345678901234567890}


@pytest.mark.parametrize("text", ["", "not json", "{'a': }", "{]"])
def test_beyond_repair_is_a_value_error(text):
    with pytest.raises(ValueError):
        loads_lenient(text)


def test_split_values_stops_at_text_and_keeps_strings_whole():
    text = '{"q": "a;b}"}; [1, {"x": "]"}] , {\'s\': "it\'s"}  and then some {"not": 1}'
    assert split_values(text) == ['{"q": "a;b}"}', '[1, {"x": "]"}]', "{'s': \"it's\"}"]
    assert json_values('```json\n{"a": 1}\n{"b": 2\n```') == [{"a": 1}, {"b": 2}]


def test_valid_json_is_untouched():
    text = json.dumps({"a": ["x, ]", {"b": None}], "c": "'q'"})
    assert loads_lenient(text) == json.loads(text)
