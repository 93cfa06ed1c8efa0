"""certain_prefix: every prefix of a JSON text gives a prefix of json.dumps of the whole value,
growing with the text, and closes into valid JSON; it stops at what is not strict JSON."""

from __future__ import annotations

import json

import pytest

from hearth.tool_parsers.partial_json import certain_prefix, certain_span

VALUES = [{"city": "Par\nis \u00e9 \"q\" \\ /", "n": [1, 2.5, -300.0, True, None, False], "o": {}, "e": [],
           "z": {"a": "b", "c": [[]]}}, {}, {"emoji": "\U0001f600", "big": 12345678901234567890}]


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("style", [{}, {"indent": 2}, {"separators": (",", ":")}, {"ensure_ascii": True}])
def test_prefixes_grow_toward_the_canonical_text(value, style):
    raw, final = json.dumps(value, **style), json.dumps(value, ensure_ascii=False)
    prev = ""
    for k in range(1, len(raw) + 1):
        certain, closing = certain_prefix(raw[:k])
        assert certain.startswith(prev) and final.startswith(certain), raw[:k]
        json.loads(certain + closing)
        prev = certain
    assert prev == final


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("style", [{}, {"indent": 2}, {"separators": (",", ":")}, {"ensure_ascii": True}])
def test_the_certain_prefix_then_the_text_after_its_source_is_the_whole_value(value, style):
    """certain_span's end: what the model wrote after the certain part, appended to it, reads as the
    whole value (a streamed call whose final parse fails ends as the model wrote it: early_call)."""
    raw = json.dumps(value, **style)
    for k in range(1, len(raw) + 1):
        certain, _, end = certain_span(raw[:k])
        assert json.loads(certain + raw[end:]) == value, raw[:k]


@pytest.mark.parametrize("text, end", [('{"a": 1, "b": NaN}', 7), ('{"a" : 1 ,"b": 1e400}', 8), ('{"a": "x\\', 8)])
def test_the_span_ends_where_the_certain_part_was_read(text, end):
    assert certain_span(text)[2] == end


@pytest.mark.parametrize("text, certain", [
    ('{"a": 1, "a": 2}', '{"a": 1'),  # json.loads keeps the last: stop at the repeat
    ("{'a': 1}", "{"),  # single quotes: the final parse repairs them
    ('{"a": 12', "{"),  # the number may go on
    ('{"a": tru', "{"),
    ('{"a": "x\\', '{"a": "x'),  # an escape cut in half
    ('{"a": 1,}', '{"a": 1'),
    ('{"a": 1, "b": 1e400}', '{"a": 1'),  # json.dumps would write Infinity: never streamed
    ('{"a": 1, "b": -1e400,', '{"a": 1'),
    ('{"a": 1, "b": NaN}', '{"a": 1'),
])
def test_stops_at_what_is_not_certain(text, certain):
    assert certain_prefix(text)[0] == certain
