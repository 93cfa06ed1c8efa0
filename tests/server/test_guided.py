"""vLLM's structured-output fields (guided_json / guided_regex / guided_choice / guided_grammar and
structured_outputs: {...}) reach the engine as the constraint response_format sets; they were ignored,
named only in x-hearth-ignored-fields. One constraint per request."""

from __future__ import annotations

import json

import pytest

from hearth.api.guided import KINDS
from hearth.sample.grammar import GrammarCompiler
from tests.tool_guard.tiny_vocab import TinyTokenizer

CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
USER = [{"role": "user", "content": "hi"}]
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}}
TOK = TinyTokenizer()
COMPILER = GrammarCompiler(TOK, TOK.vocab_size)


def _post(fake, path: str, extra: dict):
    base = {"messages": USER} if path == CHAT else {"prompt": "hi"}
    return fake.client.post(path, json={**base, "max_tokens": 4, **extra})


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
@pytest.mark.parametrize("extra,field,want", [
    ({"guided_json": SCHEMA}, "json_schema", SCHEMA),
    ({"guided_json": '{"type": "object", "properties": {"a": {"type": "integer"}}}'}, "json_schema", SCHEMA),
    ({"guided_regex": "[0-9]+"}, "regex", "[0-9]+"),
    ({"guided_grammar": 'start: "x"'}, "grammar", 'start: "x"'),
    ({"structured_outputs": {"json": SCHEMA}}, "json_schema", SCHEMA),
    ({"structured_outputs": {"regex": "[0-9]+"}}, "regex", "[0-9]+"),
    ({"structured_outputs": {"grammar": 'start: "x"'}}, "grammar", 'start: "x"'),
    ({"structured_outputs": {"json_object": True}}, "json_object", True),
])
def test_vllm_fields_become_the_engines_constraint(fake, path, extra, field, want):
    r = _post(fake, path, extra)
    assert r.status_code == 200, r.text
    assert "x-hearth-ignored-fields" not in r.headers
    assert getattr(fake.last.params.structured_output, field) == want


def _accepts(regex: str, text: str, kind: str = "regex") -> bool:
    return takes(KINDS[kind](regex), text)


def takes(so, text: str) -> bool:
    """Whether the constraint takes `text` whole (the end of generation allowed after it)."""
    m = COMPILER.matcher(so)
    if not all(m.accept(t) for t in TOK.encode(text)):
        return False
    mask = m.bitmask()
    return int.from_bytes(mask[4 * (TOK.eos_id // 32):4 * (TOK.eos_id // 32) + 4], "little") >> (TOK.eos_id % 32) & 1


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_choice_is_exactly_one_of_the_literals(fake, path):
    choices = ["yes", "no", "a.b (c)|d", "x+"]
    for extra in ({"guided_choice": choices}, {"structured_outputs": {"choice": choices}}):
        assert _post(fake, path, extra).status_code == 200
        regex = fake.last.params.structured_output.regex
        assert all(_accepts(regex, c) for c in choices)  # regex metacharacters are literal
        assert not any(_accepts(regex, t) for t in ["axb (c)|d", "a.b c", "d", "xx", "yesno", "ye"])


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
@pytest.mark.parametrize("extra,param", [
    ({"response_format": {"type": "json_object"}, "guided_json": SCHEMA}, "guided_json"),
    ({"guided_regex": "a", "guided_choice": ["a"]}, "guided_choice"),
    ({"guided_json": SCHEMA, "structured_outputs": {"regex": "a"}}, "structured_outputs.regex"),
    ({"structured_outputs": {"regex": "a", "grammar": 'start: "a"'}}, "structured_outputs.grammar"),
    ({"structured_outputs": {"structural_tag": "x"}}, "structured_outputs.structural_tag"),
    ({"guided_regex": "(unclosed"}, "guided_regex"),
    ({"guided_grammar": "start: ("}, "guided_grammar"),
    ({"guided_json": "{not json"}, "guided_json"),
    ({"guided_json": 5}, "guided_json"),
    ({"guided_json": {"type": "no-such-type"}}, "guided_json"),
    ({"guided_choice": []}, "guided_choice"),
    ({"guided_choice": "yes"}, "guided_choice"),
    ({"guided_regex": 3}, "guided_regex"),
    ({"structured_outputs": {"json_object": "yes"}}, "structured_outputs.json_object"),
])
def test_a_bad_or_second_constraint_is_a_400_naming_it(fake, path, extra, param):
    r = _post(fake, path, extra)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["message"].startswith(f"{param}: ") and error["param"] == param, error


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_a_gbnf_grammar_is_read_as_vllm_reads_it(fake, path):
    """llama.cpp's GBNF, converted by llguidance itself (its grammar_from "grammar", as vLLM's guided_grammar);
    it was a bare Lark parse error ("Expected token '_', found '='")."""
    gbnf = 'root ::= answer "."\nanswer ::= "yes" | "no"'
    assert _post(fake, path, {"guided_grammar": gbnf}).status_code == 200
    assert fake.last.params.structured_output.grammar == gbnf
    assert _accepts(gbnf, "yes.", "grammar") and _accepts(gbnf, "no.", "grammar")
    assert not any(_accepts(gbnf, t, "grammar") for t in ["yes", "maybe.", "yes.no."])


@pytest.mark.parametrize("gbnf,good,bad", [
    ('root ::= start\nstart ::= "x"', ["x"], ["start", "xx"]),  # read as Lark (`start ::=` opens a line)
    ('root ::= start "[start]" # start\nstart ::= "start" | [s-t]', ["start[start]", "s[start]"], ["x[start]"]),
    ('root ::= start-gbnf start\nstart ::= "a"\nstart-gbnf ::= "b"', ["ba"], ["ab"]),  # the fresh name is fresh
], ids=["start", "start-in-literals", "taken-name"])
def test_a_gbnf_rule_named_start_is_gbnf(fake, gbnf, good, bad):
    """`start ::=` was taken for Lark (llguidance's test: a line opening `start`), and GBNF's root
    then clashed with the rule in the conversion: a 400 for a valid GBNF grammar."""
    assert _post(fake, CHAT, {"guided_grammar": gbnf}).status_code == 200
    assert all(_accepts(gbnf, t, "grammar") for t in good)
    assert not any(_accepts(gbnf, t, "grammar") for t in bad)


@pytest.mark.parametrize("extra,reason", [
    ({"guided_regex": "(unclosed"}, "error: unclosed group"),  # the first line stopped at 'regex parse error:'
    ({"guided_grammar": "start: /[a-/"}, "error: unclosed character class"),
    ({"guided_grammar": 'root ::= "a" ('}, "Expected ')'"),  # GBNF's own error, not Lark's
    ({"guided_grammar": "start: ("}, "expected Lark in llguidance's dialect, with a `start:` rule, or GBNF"),
])
def test_a_grammar_error_keeps_its_reason_in_one_bounded_line(fake, extra, reason):
    error = _post(fake, CHAT, extra).json()["error"]
    assert reason in error["message"] and "\n" not in error["message"], error


def test_a_long_grammar_error_is_bounded():
    from hearth.sample.grammar import REASON_CHARS, _reason

    assert _reason("x" * 5000).endswith("…") and len(_reason("x" * 5000)) == REASON_CHARS
    assert _reason("a:\n  (\n  ^\nerror: b\n") == "a:; (; error: b"


def test_a_forced_tool_call_and_a_guided_field_are_one_constraint_too(fake):
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    r = _post(fake, CHAT, {"tools": [tool], "tool_choice": {"type": "function", "function": {"name": "f"}},
                           "guided_regex": "a"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "guided_regex", r.text


def test_guided_json_as_text_or_object():
    """hearth.json_object parses it (speculative_config's too): the words are a JSON schema's."""
    assert KINDS["json"]('{"type": "integer"}').json_schema == {"type": "integer"}
    with pytest.raises(ValueError, match=r"^must be a JSON schema object, not an array$"):
        KINDS["json"]("[1]")
    with pytest.raises(ValueError, match=r"^is not valid JSON: .* \(at 1\)$"):
        KINDS["json"]("{")


@pytest.mark.parametrize("schema,good,bad", [
    ({"type": "integer"}, ["9007199254740991", "-9007199254740991", "0"], ["9007199254740992", "1" + "0" * 40]),
    ({"type": ["integer", "null"]}, ["null", "12"], ["1" + "0" * 20]),
    ({"type": "object", "properties": {"pop": {"type": "integer", "minimum": 0}}, "required": ["pop"]},
     ['{"pop":12}'], ['{"pop":-1}', '{"pop":' + "1" * 17 + "}"]),
    ({"type": "integer", "maximum": 10**18}, ["1" + "0" * 17], ["-" + "1" * 17]),  # a bound given is kept
    ({"type": "array", "items": {"type": "integer"}}, ["[1,2]"], ["[1," + "9" * 17 + "]"]),
    ({"const": {"type": "integer"}}, ['{"type":"integer"}'], []),  # data, not a schema: left as given
    ({"type": "object", "properties": {"default": {"type": "integer"}}, "required": ["default"]},
     ['{"default":1}'], ['{"default":' + "1" * 17 + "}"]),  # a property's name is no keyword
    # a side past the safe bound: the other side stays open (a bound there made it unsatisfiable)
    ({"type": "integer", "minimum": 10**17}, [str(10**17 + 5)], [str(10**17 - 1)]),
    ({"type": "integer", "maximum": -10**17}, [str(-10**17 - 5)], ["0"]),
    ({"type": "integer", "exclusiveMinimum": 10**16}, [str(10**17)], ["0", str(-10**17)]),
], ids=["integer", "nullable", "property", "given-bound", "items", "const", "named-default", "minimum-past",
        "maximum-past", "exclusive-past"])
def test_an_integer_without_bounds_ends_within_a_safe_integer(schema, good, bad):
    """A new user's trial: `"pop": {"type": "integer"}` let a small model write zeros until max_tokens."""
    assert all(_accepts(json.dumps(schema), t, "json") for t in good)
    assert not any(_accepts(json.dumps(schema), t, "json") for t in bad)


@pytest.mark.parametrize("schema,good,bad", [
    ({"type": "number"}, ["1.5", "-2", "0", "0.0000000001", "9" * 15 + ".25", "1e5", "6.02E+23", "-1.5e-07"],
     ["0." + "3" * 11, "1" + "0" * 15, "-1" + "0" * 15, "1e999", "1e"]),  # an exponent of two digits
    ({"type": ["number", "null"]}, ["null", "2.5"], ["0." + "1" * 11]),
    ({"type": "object", "properties": {"t": {"type": "number", "minimum": 0, "maximum": 1}}, "required": ["t"]},
     ['{"t":0.5}', '{"t":1}'], ['{"t":0.' + "1" * 11 + "}", '{"t":2}']),
    ({"type": "array", "items": {"type": "number"}}, ["[1.5,2]"], ["[0." + "9" * 11 + "]"]),
    ({"type": "number", "multipleOf": 0.25}, ["0.75"], ["0.7", "1" + "0" * 15]),  # its own step is kept
    ({"type": "number", "minimum": -1e17, "maximum": 5}, ["-" + "9" * 16, "4.5"], ["6"]),  # a bound given is kept
    # no multiple of the step in the range: no step (the range alone), never an unsatisfiable schema
    ({"type": "number", "minimum": 1e-11, "maximum": 2e-11}, ["0.000000000015"], ["0.00000000003"]),
    ({"type": "number", "enum": [1e-12, 2.5]}, ["0.000000000001", "2.5"], ["2"]),  # a finite set: left as given
    ({"type": "integer", "enum": [10**17]}, [str(10**17)], ["1"]),  # a bound made it unsatisfiable
    # a bound given beside allOf / $ref meets ours in one instance: the schema goes as given
    ({"allOf": [{"type": "number"}], "minimum": 2e15}, ["3" + "0" * 15], ["1"]),
    ({"$defs": {"n": {"type": "number"}}, "$ref": "#/$defs/n", "minimum": 2e15}, ["3" + "0" * 15], ["1"]),
    ({"allOf": [{"type": "integer"}, {"minimum": 10**17}]}, [str(10**17)], ["1"]),
], ids=["number", "nullable", "range", "items", "own-step", "given-bound", "narrow-range", "enum", "integer-enum",
        "all-of-bound", "ref-bound", "all-of-integer"])
def test_a_number_without_bounds_ends_within_15_integer_and_10_fraction_digits(schema, good, bad):
    """`{"type": "number"}` took any number of digits: `0.333...` until max_tokens."""
    assert all(_accepts(json.dumps(schema), t, "json") for t in good)
    assert not any(_accepts(json.dumps(schema), t, "json") for t in bad)


@pytest.mark.parametrize("schema,compiles", [
    ({"type": "object", "properties": {"n": {"type": "integer"}, "x": {"type": "number"}}}, 1),
    ({"type": "string"}, 1),  # nothing to bound
    ({"allOf": [{"type": "integer"}, {"minimum": 10**17}]}, 2),  # the bounded copy fails: the schema as given
])
def test_a_json_schema_is_compiled_once(monkeypatch, schema, compiles):
    """The bounded copy's satisfiability was checked by a compile of its own, then compiled again (~1 ms a
    request): the compile of the grammar is the check now."""
    import llguidance
    from hearth.sample.grammar import compile_grammar
    from hearth.sampling_params import StructuredOutput
    from tests.tool_guard.test_grammar import _CountingMatcher

    from hearth.sample import grammar

    counted = _CountingMatcher(llguidance.LLMatcher)
    monkeypatch.setattr(llguidance, "LLMatcher", counted)
    grammar._compile.cache_clear()  # an earlier test may have compiled the same schema
    compile_grammar(StructuredOutput(json_schema=schema))
    assert counted.compiles == compiles


LLAMA_COMPLETION = "/completion"
GBNF = 'root ::= "yes" | "no"'


@pytest.mark.parametrize("path", [LLAMA_COMPLETION, CHAT, COMPLETIONS])
@pytest.mark.parametrize("extra,field,want", [
    ({"json_schema": SCHEMA}, "json_schema", SCHEMA),
    ({"json_schema": {}}, "json_schema", {}),  # llama-server's "any JSON value"
    ({"grammar": GBNF}, "grammar", GBNF),
])
def test_llama_servers_json_schema_and_grammar_constrain(fake, path, extra, field, want):
    """llama-server's `json_schema` and `grammar` (GBNF), on its /completion and its OpenAI routes: they were
    ignored (named in x-hearth-ignored-fields) and the answer ran free."""
    r = _post(fake, path, extra) if path != LLAMA_COMPLETION else \
        fake.client.post(path, json={"prompt": "hi", "n_predict": 4, **extra})
    assert r.status_code == 200, r.text
    assert "x-hearth-ignored-fields" not in r.headers
    assert getattr(fake.last.params.structured_output, field) == want


@pytest.mark.parametrize("extra,param", [
    ({"json_schema": {"type": "objekt"}}, "json_schema"),
    ({"json_schema": [1]}, "json_schema"),
    ({"grammar": "root ::= [0-9"}, "grammar"),
    ({"grammar": GBNF, "json_schema": SCHEMA}, "grammar"),
])
def test_llama_servers_bad_constraint_is_a_400_in_its_shape(fake, extra, param):
    r = fake.client.post(LLAMA_COMPLETION, json={"prompt": "hi", "n_predict": 4, **extra})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == 400 and error["param"] == param and error["message"].startswith(f"{param}: "), error


def test_llama_servers_empty_grammar_is_none(fake):
    """Its default, which its old web UI sent with every request."""
    r = fake.client.post(LLAMA_COMPLETION, json={"prompt": "hi", "n_predict": 4, "grammar": ""})
    assert r.status_code == 200 and fake.last.params.structured_output is None, r.text


@pytest.mark.parametrize("regex,good,bad", [
    (r"\d{3}-\d{4}", ["555-1234"], ["🯸🯸🯸-🯸🯸🯸🯸", "١٢٣-٤٥٦٧"]),
    (r"\w+", ["a_Z9"], ["héllo", "日本"]),
    (r"[\d.]+", ["3.14"], ["٣.١٤"]),
    (r"[^\W_]+", ["ab1"], ["a_b", "é"]),
    (r"\D\W", ["x-", "١ "], ["1-", "xa"]),
    (r"\\d", ["\\d"], ["\\1"]),
])
def test_regex_classes_are_ascii_as_json_schema_patterns_are(regex, good, bad):
    """llguidance's plain regex read \\d and \\w as Unicode classes: guided_regex \\d{3}-\\d{4} let SmolLM2
    write U+1FBF8 segmented digits; a JSON schema's pattern (ECMAScript), xgrammar and outlines read ASCII."""
    assert all(_accepts(regex, t) for t in good)
    assert not any(_accepts(regex, t) for t in bad)


def test_a_json_object_has_bounded_numbers_at_any_depth():
    """response_format json_object was {"type": "object"}: its values' numbers took any number of digits
    (SmolLM2 wrote `{", ":1000...` to max_tokens)."""
    good = ['{}', '{"a":1,"b":[true,null,"x",{"c":-2.5}],"d":{"e":{}}}', '{"n":' + "9" * 15 + "}"]
    bad = ['{"a":1' + "0" * 16 + "}", '{"a":[0.' + "3" * 11 + "]}", '{"a":{"b":' + "1" * 17 + "}}", "[]", "1"]
    assert all(_accepts(True, t, "json_object") for t in good)
    assert not any(_accepts(True, t, "json_object") for t in bad)


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_vllms_no_op_structured_output_options_are_taken(fake, path):
    """vLLM's disable_any_whitespace and disable_fallback change nothing here (compact JSON; one engine):
    they were a 400 'is not supported'."""
    options = {"json": SCHEMA, "disable_any_whitespace": True, "disable_fallback": False}
    r = _post(fake, path, {"structured_outputs": options})
    assert r.status_code == 200, r.text
    assert fake.last.params.structured_output.json_schema == SCHEMA
    r = _post(fake, path, {"structured_outputs": {"json": SCHEMA, "disable_any_whitespace": "yes"}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "structured_outputs.disable_any_whitespace"


EXPONENT_SCHEMA = {"$defs": {"q": {"type": "object", "properties": {"v": {"type": "number"}}, "required": ["v"]}},
                   "type": "object", "properties": {"q": {"$ref": "#/$defs/q"}, "meta": {"type": "object"}},
                   "required": ["q"]}


@pytest.mark.parametrize("extra", [
    {"guided_json": EXPONENT_SCHEMA}, {"structured_outputs": {"json": EXPONENT_SCHEMA}},
    {"response_format": {"type": "json_schema", "json_schema": {"name": "q", "schema": EXPONENT_SCHEMA}}},
    {"response_format": {"type": "json_object"}}, {"structured_outputs": {"json_object": True}},
], ids=["guided_json", "structured_outputs.json", "response_format", "json_object", "structured_outputs.json_object"])
def test_every_json_field_keeps_a_numbers_exponent(fake, extra):
    """Each field reaches the one schema grammar: a number under a `$ref`, in any JSON value and in json_object
    keeps `6.626e-27` (llguidance's bounded number cut it at the `e`), and `1e999` (inf) stays refused."""
    assert _post(fake, CHAT, extra).status_code == 200
    so = fake.last.params.structured_output
    assert takes(so, '{"q":{"v":6.626e-27},"meta":{"w":[-0.5E3]}}')
    assert not takes(so, '{"q":{"v":1e999}}') and not takes(so, '{"q":{"v":1e}}')
