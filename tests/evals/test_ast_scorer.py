"""BFCL's AST rules, one hand-made case per rule and per way to break it."""

from __future__ import annotations

import pytest

from hearth.evals.ast_scorer import normalize, score

AREA = {"name": "geo.area", "parameters": {"type": "dict", "required": ["base", "height"], "properties": {
    "base": {"type": "integer"}, "height": {"type": "float"}, "unit": {"type": "string"},
    "tags": {"type": "array", "items": {"type": "string"}}, "opts": {"type": "dict"},
    "flag": {"type": "boolean"}}}}
ANSWER = {"geo.area": {"base": [10], "height": [5.0], "unit": ["square meters", ""], "tags": [["a", "b"], ""],
                       "opts": [{"k": ["v"], "opt": ["", 1]}, ""], "flag": ["", False]}}
PLAY = {"name": "play", "parameters": {"type": "dict", "required": ["artist"], "properties": {
    "artist": {"type": "string"}, "minutes": {"type": "integer"}}}}
SWIFT = {"play": {"artist": ["Taylor Swift"], "minutes": [20]}}
MAROON = {"play": {"artist": ["Maroon 5"], "minutes": [15, ""]}}


def area(**args):
    return [{"geo.area": {"base": 10, "height": 5.0, **args}}]


CASES = [
    # (id, category, functions, calls, answer, passes, reason contains)
    ("exact", "simple_python", [AREA], area(), [ANSWER], True, ""),
    ("wrong name", "simple_python", [AREA], [{"geo_area": {"base": 10, "height": 5.0}}], [ANSWER], False, "called"),
    ("missing required", "simple_python", [AREA], [{"geo.area": {"base": 10}}], [ANSWER], False, "required"),
    ("unexpected parameter", "simple_python", [AREA], area(color="red"), [ANSWER], False, "unexpected"),
    ("int accepted for float", "simple_python", [AREA], [{"geo.area": {"base": 10, "height": 5}}], [ANSWER], True, ""),
    ("float refused for int", "simple_python", [AREA], [{"geo.area": {"base": 10.0, "height": 5.0}}], [ANSWER], False, "expected integer"),
    ("bool is not int", "simple_python", [AREA], [{"geo.area": {"base": True, "height": 5.0}}], [ANSWER], False, "expected integer"),
    ("string type", "simple_python", [AREA], area(unit=3), [ANSWER], False, "expected string"),
    ("normalized string", "simple_python", [AREA], area(unit="Square_Meters."), [ANSWER], True, ""),
    ("string not allowed", "simple_python", [AREA], area(unit="feet"), [ANSWER], False, "not one of"),
    ("value not allowed", "simple_python", [AREA], [{"geo.area": {"base": 11, "height": 5.0}}], [ANSWER], False, "not one of"),
    ("optional left out", "simple_python", [AREA], area(), [ANSWER], True, ""),
    ("non-optional left out", "simple_python", [AREA],
     [{"geo.area": {"base": 10, "height": 5.0}}], [{"geo.area": {**ANSWER["geo.area"], "flag": [True]}}], False, "left out"),
    ("optional given its value", "simple_python", [AREA], area(flag=False), [ANSWER], True, ""),
    ("list element-wise, normalized", "simple_python", [AREA], area(tags=["A", "b"]), [ANSWER], True, ""),
    ("list order matters", "simple_python", [AREA], area(tags=["b", "a"]), [ANSWER], False, "not one of"),
    ("list item type", "simple_python", [AREA], area(tags=["a", 2]), [ANSWER], False, "array items"),
    ("dict keys and values", "simple_python", [AREA], area(opts={"k": "V"}), [ANSWER], True, ""),
    ("dict unexpected key", "simple_python", [AREA], area(opts={"k": "v", "z": 1}), [ANSWER], False, "not one of"),
    ("dict missing key", "simple_python", [AREA], area(opts={"opt": 1}), [ANSWER], False, "not one of"),
    ("variable: answer's type", "simple_python", [AREA],
     [{"geo.area": {"base": "b", "height": 5.0}}], [{"geo.area": {"base": ["b"], "height": [5.0]}}], True, ""),
    ("simple wants one call", "simple_python", [AREA], area() + area(), [ANSWER], False, "2 calls"),
    ("no call", "simple_python", [AREA], [], [ANSWER], False, "0 calls"),
    ("multiple: the right one", "multiple", [PLAY, AREA], area(), [ANSWER], True, ""),
    ("multiple: another function", "multiple", [PLAY, AREA], [{"play": {"artist": "x"}}], [ANSWER], False, "called"),
    ("parallel in order", "parallel", [PLAY], [{"play": {"artist": "Taylor Swift", "minutes": 20}},
                                               {"play": {"artist": "Maroon 5", "minutes": 15}}], [SWIFT, MAROON], True, ""),
    ("parallel any order", "parallel", [PLAY], [{"play": {"artist": "Maroon 5"}},
                                                {"play": {"artist": "taylor swift", "minutes": 20}}], [SWIFT, MAROON], True, ""),
    ("parallel count", "parallel", [PLAY], [{"play": {"artist": "Maroon 5"}}], [SWIFT, MAROON], False, "1 calls, expected 2"),
    ("parallel one wrong", "parallel", [PLAY], [{"play": {"artist": "Maroon 5"}},
                                                {"play": {"artist": "Adele", "minutes": 20}}], [SWIFT, MAROON], False, "no call matches"),
    ("parallel the same call twice", "parallel", [PLAY], [{"play": {"artist": "Maroon 5"}}] * 2, [SWIFT, MAROON], False, "no call matches"),
    # greedy matching would give call 0 to the first answer that fits it and then miss; a matching does not
    ("parallel needs a matching", "parallel", [PLAY],
     [{"play": {"artist": "Maroon 5", "minutes": 15}}, {"play": {"artist": "Maroon 5"}}],
     [{"play": {"artist": ["Maroon 5"], "minutes": [15, ""]}}, {"play": {"artist": ["Maroon 5"], "minutes": [15]}}], True, ""),
    ("parallel_multiple", "parallel_multiple", [PLAY, AREA], [{"play": {"artist": "Taylor Swift", "minutes": 20}}] + area(),
     [ANSWER, SWIFT], True, ""),
    ("irrelevance: no call", "irrelevance", [PLAY], [], [], True, ""),
    ("irrelevance: a call", "irrelevance", [PLAY], [{"play": {"artist": "x"}}], [], False, "irrelevant"),
]


@pytest.mark.parametrize("category,functions,calls,answer,passes,reason", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rule(category, functions, calls, answer, passes, reason):
    v = score(category, functions, calls, answer)
    assert v.ok is passes, v.reason
    assert reason in v.reason


def test_normalize():
    assert normalize("April 1, 2024") == normalize("april 1,2024") == normalize("April-1 2024") == "april12024"
    assert normalize("it's") == 'it"s'
