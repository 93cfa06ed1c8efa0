"""The table of model outputs every tool-call test runs over: well-formed calls and the malformed
ones small models write, per format, with the content and calls each must give."""

from __future__ import annotations

from typing import NamedTuple


def _tool(name: str, **props: dict) -> dict:
    return {"type": "function", "function": {
        "name": name, "description": f"{name} tool",
        "parameters": {"type": "object", "properties": props, "required": list(props)}}}


TOOLS = [
    _tool("get_weather", city={"type": "string"}, unit={"type": "string", "enum": ["c", "f"]}),
    _tool("add", a={"type": "integer"}, b={"type": "integer"}),
    _tool("search", query={"type": "string"}),
]
# Anthropic's shape of one of them: parsers accept both
ANTHROPIC_TOOLS = [{"name": "add", "description": "add", "input_schema": TOOLS[1]["function"]["parameters"]}]

PARIS = ("get_weather", {"city": "Paris"})
ADD = ("add", {"a": 1, "b": 2})
GW = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
ADD_JSON = '{"name": "add", "arguments": {"a": 1, "b": 2}}'


def tag(body: str) -> str:
    """A hermes / qwen_xml call region."""
    return f"<tool_call>\n{body}\n</tool_call>"


def xml(name: str, **params: str) -> str:
    """A Qwen3-Coder function body, each value on its own lines as the template writes it."""
    return "".join([f"<function={name}>\n", *(f"<parameter={k}>\n{v}\n</parameter>\n"
                                               for k, v in params.items()), "</function>"])


def harmony_call(name: str, args: str, end: str = "<|call|>", role: bool = False) -> str:
    """A harmony (gpt-oss) call message: the recipient in the channel, as the model writes it, or
    before the channel (role=True), as the template writes calls back."""
    if role:
        return f" to=functions.{name}<|channel|>commentary json<|message|>{args}{end}"
    return f"<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>{args}{end}"


def gemma(name: str, body: str) -> str:
    """A Gemma 4 call: `body` between the braces, strings written between <|"|> marks (Q)."""
    return f"<|tool_call>call:{name}{{{body}}}<tool_call|>"


Q = '<|"|>'
THOUGHT = "<|channel|>analysis<|message|>The user wants the weather.<|end|><|start|>assistant"


class Case(NamedTuple):
    fmt: str
    text: str
    content: str
    calls: list  # (name, arguments as a dict)
    tools: list | None = TOOLS


CASES = {
    # hermes: <tool_call>{...}</tool_call>
    "hermes_one": Case("hermes", tag(GW), "", [PARIS]),
    "hermes_text_before": Case("hermes", "Let me check.\n" + tag(GW), "Let me check.", [PARIS]),
    "hermes_text_around": Case("hermes", f"Sure. <tool_call>{GW}</tool_call> Done.", "Sure.  Done.", [PARIS]),
    "hermes_two": Case("hermes", tag(GW) + "\n" + tag(ADD_JSON), "", [PARIS, ADD]),
    "hermes_fenced": Case("hermes", tag(f"```json\n{GW}\n```"), "", [PARIS]),
    "hermes_args_key": Case("hermes", tag('{"name": "add", "args": {"a": 1, "b": 2}}'), "", [ADD]),
    "hermes_parameters_key": Case("hermes", tag('{"name": "add", "parameters": {"a": 1, "b": 2}}'), "", [ADD]),
    "hermes_arguments_string": Case(
        "hermes", tag('{"name": "add", "arguments": "{\\"a\\": 1, \\"b\\": 2}"}'), "", [ADD]),
    "hermes_openai_nesting": Case(
        "hermes", tag('{"type": "function", "function": {"name": "add", "arguments": "{\\"a\\":1,\\"b\\":2}"}}'),
        "", [ADD]),
    "hermes_tool_name_input": Case("hermes", tag('{"tool_name": "add", "input": {"a": 1, "b": 2}}'), "", [ADD]),
    "hermes_tool_params": Case("hermes", tag('{"tool": "add", "params": {"a": 1, "b": 2,},}'), "", [ADD]),
    "hermes_python_dict": Case(
        "hermes", tag("{'name': 'search', 'arguments': {'query': \"it's\", 'x': True, 'y': None}}"),
        "", [("search", {"query": "it's", "x": True, "y": None})], None),
    "hermes_cut_off": Case("hermes", 'Checking: <tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}',
                           "Checking:", [ADD]),
    "hermes_no_end_tag": Case("hermes", f"<tool_call>{ADD_JSON}", "", [ADD]),
    "hermes_unknown_tool": Case("hermes", tag('{"name": "rm_rf", "arguments": {}}'),
                                tag('{"name": "rm_rf", "arguments": {}}'), []),
    "hermes_any_tool_without_list": Case("hermes", tag('{"name": "rm_rf", "arguments": {}}'), "",
                                         [("rm_rf", {})], None),
    "hermes_garbage": Case("hermes", "I think <tool_call>not json</tool_call> ok",
                           "I think <tool_call>not json</tool_call> ok", []),
    "hermes_plain": Case("hermes", "The weather is nice.\n", "The weather is nice.\n", []),
    "hermes_list_in_tag": Case("hermes", tag(f"[{GW}, {ADD_JSON}]"), "", [PARIS, ADD]),
    "hermes_xml_body": Case("hermes", tag(xml("add", a="1", b="2")), "", [ADD]),
    "hermes_good_then_unknown": Case("hermes", tag(ADD_JSON) + "\n" + tag('{"name": "nope"}'),
                                     tag('{"name": "nope"}'), [ADD]),
    "hermes_arguments_list": Case("hermes", tag('{"name": "add", "arguments": [1, 2]}'),
                                  tag('{"name": "add", "arguments": [1, 2]}'), []),
    "hermes_marker_prefix_at_end": Case("hermes", "a < b, see <tool_ca", "a < b, see <tool_ca", []),
    "hermes_namespaced_name": Case("hermes", tag('{"name": "functions.add", "arguments": {"a": 1, "b": 2}}'),
                                   "", [ADD]),
    "hermes_anthropic_tools": Case("hermes", tag(ADD_JSON), "", [ADD], ANTHROPIC_TOOLS),
    "hermes_bare_json": Case("hermes", ADD_JSON, "", [ADD]),
    "hermes_bare_fenced": Case("hermes", f"```json\n{GW}\n```", "", [PARIS]),
    # parallel calls written the lead's way: a fence each, doubled braces each, a fence then the tags
    "hermes_two_fences": Case("hermes", f"```json\n{GW}\n```\n```json\n{ADD_JSON}\n```", "", [PARIS, ADD]),
    "hermes_doubled_two": Case("hermes", "{" + GW + "}\n{" + ADD_JSON + "}", "", [PARIS, ADD]),
    "hermes_fence_then_tag": Case("hermes", f"```json\n{GW}\n```\n" + tag(ADD_JSON), "", [PARIS, ADD]),
    "hermes_fence_then_code": Case("hermes", f"```json\n{GW}\n```\n```python\nx = 1\n```", "", [PARIS]),
    "hermes_bare_not_a_call": Case("hermes", '{"a": 1} is a dict', '{"a": 1} is a dict', []),
    "hermes_code_fence_not_json": Case("hermes", "```python\nx = 1\n```", "```python\nx = 1\n```", []),
    "hermes_no_arguments": Case("hermes", tag('{"name": "search"}'), "", [("search", {})]),
    "hermes_xml_in_a_json_string": Case(
        "hermes", tag('{"name": "search", "arguments": {"query": "<function=x>"}}'), "",
        [("search", {"query": "<function=x>"})]),
    "hermes_unicode": Case("hermes", tag('{"name": "search", "arguments": {"query": "café ☕"}}'), "",
                           [("search", {"query": "café ☕"})]),
    # a number a double cannot hold (json.dumps wrote it back as Infinity, not JSON) or NaN is not carried:
    # the call stays text (streamed to a client, a call already announced ends as the model wrote it,
    # marked unparsed, nothing dropped: tests/tool_parsers/test_streaming.py)
    "hermes_number_past_a_double": Case("hermes", tag('{"name": "add", "arguments": {"a": 1e400, "b": 2}}'),
                                        tag('{"name": "add", "arguments": {"a": 1e400, "b": 2}}'), []),
    "hermes_nan_after_the_call_began": Case("hermes", tag('{"name": "add", "arguments": {"b": 2, "a": NaN}}'),
                                            tag('{"name": "add", "arguments": {"b": 2, "a": NaN}}'), []),
    # mistral: [TOOL_CALLS] + JSON list, or [TOOL_CALLS]name[ARGS]{...}
    "mistral_list": Case("mistral", f"[TOOL_CALLS] [{GW}]", "", [PARIS]),
    "mistral_text_before_two": Case("mistral", f"I'll check. [TOOL_CALLS][{GW}, {ADD_JSON}]", "I'll check.",
                                    [PARIS, ADD]),
    "mistral_with_id_and_eos": Case(
        "mistral", '[TOOL_CALLS][{"name": "add", "arguments": {"a": 1, "b": 2}, "id": "abc123XYZ"}]</s>',
        "", [ADD]),
    "mistral_args_form": Case("mistral", '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}', "", [PARIS]),
    "mistral_args_form_two": Case(
        "mistral", '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]add[ARGS]{"a": 1, "b": 2}',
        "", [PARIS, ADD]),
    "mistral_call_id": Case("mistral", '[TOOL_CALLS]add[CALL_ID]a1b2c3d4e[ARGS]{"a": 1, "b": 2}', "", [ADD]),
    "mistral_cut_off": Case("mistral", '[TOOL_CALLS][{"name": "add", "arguments": {"a": 1, "b": 2}}', "", [ADD]),
    "mistral_unknown_tool": Case("mistral", '[TOOL_CALLS][{"name": "nope", "arguments": {}}]',
                                 '[TOOL_CALLS][{"name": "nope", "arguments": {}}]', []),
    "mistral_garbage": Case("mistral", "Use [TOOL_CALLS] oops", "Use [TOOL_CALLS] oops", []),
    "mistral_object_not_list": Case("mistral", f"[TOOL_CALLS]{ADD_JSON}", "", [ADD]),
    "mistral_trailing_chatter_dropped": Case("mistral", f"[TOOL_CALLS][{ADD_JSON}]\nI called add.", "", [ADD]),
    "mistral_plain_brackets": Case("mistral", "See [1] and [TOOL] notes.", "See [1] and [TOOL] notes.", []),
    # llama3_json: {"name": ..., "parameters": ...}, maybe after <|python_tag|>, joined by ;
    "llama3_plain_call": Case("llama3_json", '{"name": "get_weather", "parameters": {"city": "Paris"}}', "",
                              [PARIS]),
    "llama3_python_tag": Case("llama3_json", '<|python_tag|>{"name": "add", "parameters": {"a": 1, "b": 2}}',
                              "", [ADD]),
    "llama3_semicolons": Case(
        "llama3_json",
        '{"name": "get_weather", "parameters": {"city": "Paris"}}; '
        '{"name": "add", "parameters": {"a": 1, "b": 2}}',
        "", [PARIS, ADD]),
    "llama3_eom": Case(
        "llama3_json", '<|python_tag|>{"name": "add", "parameters": {"a": 1, "b": 2}}<|eom_id|>', "", [ADD]),
    "llama3_text": Case("llama3_json", "The answer is 4.", "The answer is 4.", []),
    "llama3_json_not_call": Case("llama3_json", '{"answer": 4}', '{"answer": 4}', []),
    "llama3_text_then_tag": Case(
        "llama3_json", 'Let me look. <|python_tag|>{"name": "search", "parameters": {"query": "x;y"}}',
        "Let me look.", [("search", {"query": "x;y"})]),
    "llama3_python_dict": Case("llama3_json", "{'name': 'add', 'parameters': {'a': 1, 'b': 2}}", "", [ADD]),
    "llama3_builtin_python": Case("llama3_json", '<|python_tag|>brave_search.call(query="x")',
                                  '<|python_tag|>brave_search.call(query="x")', []),
    "llama3_leading_space_cut_off": Case("llama3_json", '  {"name": "add", "parameters": {"a": 1, "b": 2', "",
                                         [ADD]),
    "llama3_infinity": Case("llama3_json", '{"name": "add", "parameters": {"a": -Infinity, "b": 2}}',
                            '{"name": "add", "parameters": {"a": -Infinity, "b": 2}}', []),
    "llama3_type_function": Case(
        "llama3_json", '{"type": "function", "name": "add", "parameters": {"a": 1, "b": 2}}', "", [ADD]),
    # qwen_xml: <tool_call><function=NAME><parameter=P>value</parameter></function></tool_call>
    "qwen_xml_one": Case("qwen_xml", tag(xml("get_weather", city="Paris")), "", [PARIS]),
    "qwen_xml_schema_types": Case("qwen_xml", tag(xml("add", a="1", b="2")), "", [ADD]),
    "qwen_xml_string_stays_string": Case("qwen_xml", tag(xml("search", query="42")), "",
                                         [("search", {"query": "42"})]),
    "qwen_xml_multiline": Case("qwen_xml", tag(xml("search", query="def f():\n    return 1")), "",
                               [("search", {"query": "def f():\n    return 1"})]),
    "qwen_xml_untyped_values": Case("qwen_xml", tag(xml("x", flag="true", obj='{"k": [1, 2]}', city="Paris")),
                                    "", [("x", {"flag": True, "obj": {"k": [1, 2]}, "city": "Paris"})], None),
    "qwen_xml_two": Case(
        "qwen_xml", "Both:\n" + tag(xml("search", query="a")) + "\n" + tag(xml("add", a="1", b="2")) + "\nDone",
        "Both:\n\n\nDone", [("search", {"query": "a"}), ADD]),
    "qwen_xml_cut_off": Case("qwen_xml", "<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n"
                             "<parameter=b>\n2\n", "", [ADD]),
    "qwen_xml_missing_close_tags": Case(
        "qwen_xml", "<tool_call>\n<function=add>\n<parameter=a>\n1\n<parameter=b>\n2\n</function>\n</tool_call>",
        "", [ADD]),
    "qwen_xml_json_body": Case("qwen_xml", tag(ADD_JSON), "", [ADD]),
    "qwen_xml_function_json_body": Case("qwen_xml", tag('<function=add>{"a": 1, "b": 2}</function>'), "", [ADD]),
    # a hermes model that opens with Llama 3.1's <function=NAME>{...} (the tool guard's lazy grammar takes it too)
    "hermes_function_lead": Case("hermes", '<function=add>{"a": 1, "b": 2}</function>', "", [ADD]),
    "qwen_xml_number_past_a_double": Case("qwen_xml", tag(xml("add", a="-1e400", b="2")), "",
                                          [("add", {"a": "-1e400", "b": 2})]),  # the text: the guard's schema check says so
    "qwen_xml_unknown": Case("qwen_xml", tag(xml("nope")), tag(xml("nope")), []),
    "qwen_xml_typed_repair": Case(
        "qwen_xml", "<tool_call><function=add><parameter=a>True</parameter><parameter=b>2</parameter></function>"
        "</tool_call>", "", [("add", {"a": True, "b": 2})]),
    # harmony (gpt-oss): analysis -> reasoning, final / commentary -> content, to=functions.NAME -> a call
    "harmony_final": Case("harmony", THOUGHT + "<|channel|>final<|message|>It is sunny.", "It is sunny.", []),
    "harmony_final_return_kept": Case("harmony", "<|channel|>final<|message|>Done.<|return|>", "Done.", []),
    "harmony_call": Case("harmony", THOUGHT + harmony_call("get_weather", '{"city": "Paris"}', ""), "", [PARIS]),
    "harmony_call_in_role": Case("harmony", harmony_call("add", '{"a": 1, "b": 2}', role=True), "", [ADD]),
    # as gpt-oss wrote it in a llama.cpp trial: the recipient in the role and a <|constrain|> too
    "harmony_role_and_constrain": Case("harmony", '<|channel|>analysis<|message|>Seattle.<|end|><|start|>assistant to=functions.'
                                       'get_weather<|channel|>commentary <|constrain|>json<|message|>{"city": "Paris"}',
                                       "", [PARIS]),
    "harmony_two_calls": Case("harmony", harmony_call("get_weather", '{"city":"Paris"}') + "<|start|>assistant"
                              + harmony_call("add", '{"a": 1, "b": 2}', role=True), "", [PARIS, ADD]),
    "harmony_preamble": Case("harmony", "<|channel|>commentary<|message|>Let me check.<|end|><|start|>assistant"
                             + harmony_call("get_weather", '{"city": "Paris"}'), "Let me check.", [PARIS]),
    "harmony_call_in_analysis": Case("harmony", '<|channel|>analysis to=functions.search code<|message|>{"query": "x"}',
                                     "", [("search", {"query": "x"})]),
    "harmony_plain": Case("harmony", "The weather is nice.\n", "The weather is nice.\n", []),
    "harmony_text_then_final": Case("harmony", "Hi <|start|>assistant<|channel|>final<|message|>there", "Hi there", []),
    "harmony_unknown_tool": Case("harmony", harmony_call("rm_rf", "{}"), "{}", []),
    "harmony_any_tool_without_list": Case("harmony", harmony_call("rm_rf", "{}"), "", [("rm_rf", {})], None),
    "harmony_not_json": Case("harmony", harmony_call("add", "add 1 and 2"), "add 1 and 2", []),
    "harmony_cut_off": Case("harmony", harmony_call("add", '{"a": 1, "b": 2', ""), "", [ADD]),
    "harmony_no_arguments": Case("harmony", harmony_call("search", ""), "", [("search", {})]),
    "harmony_unicode": Case("harmony", "<|channel|>final<|message|>café ☕ <|end|>", "café ☕ ", []),
    "harmony_header_without_body": Case("harmony", "<|channel|>final<|end|><|start|>assistant<|channel|>final"
                                        "<|message|>ok", "ok", []),
    # gemma4: <|tool_call>call:NAME{key:value,...}<tool_call|>, strings between <|"|> marks
    "gemma4_one": Case("gemma4", gemma("get_weather", f"city:{Q}Paris{Q}"), "", [PARIS]),
    "gemma4_numbers": Case("gemma4", gemma("add", "a:1,b:2"), "", [ADD]),
    "gemma4_string_stays_string": Case("gemma4", gemma("search", "query:042"), "", [("search", {"query": "042"})]),
    "gemma4_multiline_with_marks": Case("gemma4", gemma("search", f"query:{Q}def f(a, b):\n    return {{a: [b]}}{Q}"),
                                        "", [("search", {"query": "def f(a, b):\n    return {a: [b]}"})]),
    "gemma4_untyped_values": Case("gemma4", gemma("x", f"flag:true,obj:{{k:[1,2.5],s:{Q}a,b}}{Q}}},n:None"), "",
                                  [("x", {"flag": True, "obj": {"k": [1, 2.5], "s": "a,b}"}, "n": None})], None),
    "gemma4_text_around_two": Case("gemma4", "Sure. " + gemma("search", f"query:{Q}a{Q}") + gemma("add", "a:1, b:2")
                                   + " Done", "Sure.  Done", [("search", {"query": "a"}), ADD]),
    "gemma4_cut_off": Case("gemma4", "<|tool_call>call:add{a:1,b:2", "", [ADD]),
    "gemma4_unknown": Case("gemma4", gemma("nope", ""), gemma("nope", ""), []),
    "gemma4_not_a_call": Case("gemma4", "<|tool_call>add(1, 2)<tool_call|>", "<|tool_call>add(1, 2)<tool_call|>", []),
    # bare_json: the whole output is the call(s)
    "bare_object": Case("bare_json", ADD_JSON, "", [ADD]),
    "bare_list": Case("bare_json", f"[{GW}, {ADD_JSON}]", "", [PARIS, ADD]),
    "bare_fenced": Case("bare_json", f"```json\n{ADD_JSON}\n```", "", [ADD]),
    "bare_fenced_no_language": Case("bare_json", f"```\n{ADD_JSON}\n```\n", "", [ADD]),
    "bare_two_fences": Case("bare_json", f"```json\n{ADD_JSON}\n```\n\n```json\n{GW}\n```", "", [ADD, PARIS]),
    "bare_text": Case("bare_json", "Hello there", "Hello there", []),
    "bare_text_before_json": Case("bare_json", f"Here: {ADD_JSON}", f"Here: {ADD_JSON}", []),
    "bare_tool_params": Case("bare_json", '{"tool": "add", "params": {"a": 1, "b": 2}}', "", [ADD]),
    "bare_python_fence": Case("bare_json", "```python\nprint(1)\n```", "```python\nprint(1)\n```", []),
    "bare_not_a_call": Case("bare_json", "[1, 2, 3]", "[1, 2, 3]", []),
    "bare_cut_off_string": Case("bare_json", '{"name": "search", "arguments": {"query": "unfinished', "",
                                [("search", {"query": "unfinished"})]),
}
