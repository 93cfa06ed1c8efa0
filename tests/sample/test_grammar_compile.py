"""compile_grammar keeps what it compiled: a request's constraint is compiled at the API, at the
engine's admission and for its matcher, and agents resend the same tools every turn."""

import llguidance
import pytest

from hearth.sample import grammar
from hearth.sample.grammar import InvalidStructuredOutput, compile_grammar
from hearth.sampling_params import StructuredOutput


@pytest.fixture
def compiles(monkeypatch):
    from tests.tool_guard.test_grammar import _CountingMatcher

    counted = _CountingMatcher(llguidance.LLMatcher)
    monkeypatch.setattr(llguidance, "LLMatcher", counted)
    grammar._compile.cache_clear()
    yield counted
    grammar._compile.cache_clear()


def schema(*names):
    return {"type": "object", "properties": {n: {"type": "string"} for n in names}, "required": list(names)}


def test_the_same_constraint_compiles_once(compiles):
    first = compile_grammar(StructuredOutput(json_schema=schema("a", "b")))
    again = compile_grammar(StructuredOutput(json_schema=schema("a", "b")))  # an equal schema, a new object
    assert again == first and compiles.compiles == 1


def test_property_order_is_part_of_the_key(compiles):
    # the fields are written in the properties' order: a key that sorted them would serve the wrong one
    ab = compile_grammar(StructuredOutput(json_schema=schema("a", "b")))
    ba = compile_grammar(StructuredOutput(json_schema=schema("b", "a")))
    assert ab != ba and compiles.compiles == 2


def test_an_invalid_constraint_is_refused_every_time(compiles):
    for _ in range(2):
        with pytest.raises(InvalidStructuredOutput, match="invalid regex"):
            compile_grammar(StructuredOutput(regex="(("))
    assert compiles.compiles == 2  # validated again: an error is not kept
