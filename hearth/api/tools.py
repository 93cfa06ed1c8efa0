"""Tools in a request -> what goes into the prompt, how the output is parsed, and (for tool_choice
required / a named tool) the grammar that forces a call.

A template that reads `tools` gets them as OpenAI function schemas. Any other template gets
`tools_system_prompt(tools)` in the system message and its history's tool calls and results
written as hermes text (`<tool_call>{...}</tool_call>`, `<tool_response>...</tool_response>`),
and the output is parsed as hermes: the format documented in hearth.tool_parsers.prompt."""

from __future__ import annotations

import json
import re
from contextlib import contextmanager
from dataclasses import dataclass

from hearth.api.anthropic_client_tools import ClientToolError, client_tool
from hearth.api.errors import APIError
from hearth.api.messages import _kind
from hearth.sampling_params import StructuredOutput
from hearth.tool_parsers import PROMPT_FORMAT, ToolParserError, call_constraint, forced_tools, get_format, schema_error
from hearth.tool_parsers import tools_system_prompt
from hearth.tool_guard import lazy_tool_grammar


@dataclass(slots=True)
class ToolPlan:
    tools: list[dict] | None = None
    """The offered tools in OpenAI's shape; None when none are offered (or tool_choice is none)."""
    in_template: bool = False
    """Pass `tools` to the chat template (else they go into the system prompt)."""
    parse_format: str | None = None
    """Tool-call format to parse the output with; None: the output is not parsed for calls."""
    constraint: StructuredOutput | None = None
    """A forced call (tool_choice required / named), as a grammar."""
    callable: list[dict] | None = None
    """The tools a call may name: all offered ones, or OpenAI's allowed_tools subset."""
    required: bool = False
    """tool_choice forces a call (required / any / a named tool)."""
    named: str | None = None
    """The tool a named tool_choice forces: an output max_tokens cuts is a call of it (hearth.tool_parsers.cut)."""


# OpenAI's rule for a function's name, plus the dot of MCP's `server.tool` names (vLLM takes any
# string; a dotted call round-trips the call grammar and parsers: tests/server/test_tool_guard_engine)
TOOL_NAME = re.compile(r"[a-zA-Z0-9_.-]{1,64}")


def openai_tools(tools: list | None, param: str = "tools", fn_at: str = "function.") -> list[dict]:
    """Tools in OpenAI's chat shape, checked as OpenAI checks them: `type` is "function" (vLLM's default
    where absent), a name matches TOOL_NAME and is no other tool's (a call names one tool only), a
    description is a string, parameters a JSON schema. fn_at: where the function's fields sit in the
    request's own shape, for the errors' names ("": the Responses API's and legacy `functions`)."""
    out, seen = [], {}
    for i, t in enumerate(tools or []):
        if not isinstance(t, dict):
            raise APIError(400, f"{param}[{i}]: must be a tool object, not {_kind(t)}", param=f"{param}[{i}]")
        kind = t.get("type", "function")
        if kind != "function":  # OpenAI's "custom" (free-text) tools have no parser here (vLLM refuses them too)
            raise APIError(400, f"{param}[{i}].type: must be 'function', got {kind!r}", param=f"{param}[{i}].type")
        fn = t.get("function")
        where = f"{param}[{i}].{fn_at}name"
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise APIError(400, f"{where}: is required (a string)", param=where)
        if not TOOL_NAME.fullmatch(fn["name"]):
            raise APIError(400, f"{where}: {fn['name']!r} must be 1 to 64 letters, digits, '_', '-' or '.'", param=where)
        if fn["name"] in seen:
            raise APIError(400, f"{where}: {fn['name']!r} is the name of {param}[{seen[fn['name']]}] too; "
                                "tool names must be unique", param=where)
        seen[fn["name"]] = i
        if fn.get("description") is not None and not isinstance(fn["description"], str):
            at = f"{param}[{i}].{fn_at}description"
            raise APIError(400, f"{at}: must be a string, not {_kind(fn['description'])}", param=at)
        if "description" in fn and fn["description"] is None:  # none (MCP tools without a docstring): not None in a template
            fn = {k: v for k, v in fn.items() if k != "description"}
        _check_schema(fn.get("parameters"), f"{param}[{i}].{fn_at}parameters")
        out.append({"type": "function", "function": fn})
    return out


def legacy_functions(functions: list[dict], function_call) -> tuple[list[dict], str | dict | None]:
    """OpenAI's legacy `functions` / `function_call` -> tools in OpenAI's shape and a tool_choice
    (openai_tools(tools, "functions", "") checks them, naming functions[i]...)."""
    if isinstance(function_call, dict):
        if not isinstance(function_call.get("name"), str):
            raise APIError(400, "function_call.name: is required (a string)", param="function_call.name")
        function_call = {"type": "function", "function": {"name": function_call["name"]}}
    return [{"type": "function", "function": f} for f in functions], function_call


SERVER_TOOLS = ("web_search_", "code_execution_", "web_fetch_")
"""Type prefixes of Anthropic's server tools, run by Anthropic's servers, not by the client. Its
other typed tools (bash_20250124, text_editor_*, computer_*) are client tools: the client runs them."""


def anthropic_tools(tools: list | None) -> list[dict]:
    """Anthropic {name, description, input_schema} -> OpenAI function schemas (what templates read).
    An Anthropic-defined client tool ({"type": "bash_20250124", "name": "bash"}, text_editor_*,
    computer_*: no input_schema) takes the schema and description its type documents
    (hearth.api.anthropic_client_tools), an unknown type none; a server tool (SERVER_TOOLS) is
    refused, never a bare function: hearth does not run it."""
    out = []
    for i, t in enumerate(tools or []):
        kind = t.get("type") if isinstance(t, dict) else None
        if isinstance(kind, str) and kind.startswith(SERVER_TOOLS):
            raise APIError(400, f"tools[{i}].type: {kind!r} is an Anthropic server tool, which hearth does not run "
                                "(give a custom tool with name and input_schema)", param=f"tools[{i}].type")
        if not isinstance(t, dict) or not isinstance(t.get("name"), str) or not t["name"]:
            raise APIError(400, f"tools[{i}].name: is required (a string)", param=f"tools[{i}].name")
        if kind in (None, "custom") and t.get("input_schema") is None:
            raise APIError(400, f"tools[{i}].input_schema: is required (a JSON schema object)",
                           param=f"tools[{i}].input_schema")
        if t.get("description") is not None and not isinstance(t["description"], str):  # null: none (MCP's
            raise APIError(400, f"tools[{i}].description: must be a string, not {_kind(t['description'])}",
                           param=f"tools[{i}].description")
        _check_schema(t.get("input_schema"), f"tools[{i}].input_schema")
        known = client_tool(kind)
        try:  # its description and schema for this definition (a computer tool's screen in them)
            description, schema = known.definition(t) if known else ("", {"type": "object"})
        except ClientToolError as e:
            raise APIError(400, f"tools[{i}].{e.field}: {e}", param=f"tools[{i}].{e.field}") from None
        fn = {"name": t["name"], "description": t.get("description") or description,
              "parameters": t.get("input_schema") or schema}
        out.append({"type": "function", "function": fn})
    return out


def plan_tools(served, tools: list[dict], tool_choice, choice_param: str = "tool_choice") -> ToolPlan:
    """`tools` already in OpenAI's shape; tool_choice in either API's shape (errors name it `choice_param`)."""
    choice = _read_choice(tools, tool_choice, choice_param)
    if choice is None:
        return ToolPlan()
    callable_tools, tool_choice, kind, forced = choice
    in_template = served.template_supports_tools
    fmt = (served.tool_format if in_template else None) or PROMPT_FORMAT
    with _choice_error(choice_param):
        constraint = call_constraint(fmt, callable_tools, tool_choice).lark() if forced else None
    so = StructuredOutput(grammar=constraint) if constraint else None
    named = forced[0] if forced and kind in ("function", "tool") else None
    return ToolPlan(tools, in_template, fmt, so, callable_tools, bool(forced), named)


def forces_call(tools: list[dict], tool_choice, choice_param: str = "tool_choice") -> bool:
    """Whether tool_choice forces a call of `tools` (a grammar: ToolPlan.constraint), or plan_tools'
    400 for a choice of no offered tool: it needs no model, so a route asks before the load (the call's grammar,
    which needs the template's tool format, comes with the plan after it)."""
    choice = _read_choice(tools, tool_choice, choice_param)
    return choice is not None and bool(choice[3])


def _read_choice(tools: list[dict], tool_choice, param: str) -> tuple[list[dict], object, str, list[str]] | None:
    """(the callable tools, the choice, its kind, the tools it forces) of tool_choice over `tools`, or the 400
    naming `param`; None: no tools take part (none given, or tool_choice none)."""
    kind = tool_choice.get("type") if isinstance(tool_choice, dict) else tool_choice
    callable_tools = tools
    if kind == "allowed_tools":
        callable_tools, tool_choice = _allowed_tools(tools, tool_choice, param)
        kind = tool_choice
    if kind is not None and kind not in ("none", "auto", "required", "any", "function", "tool"):
        raise APIError(400, f"{param}: unknown choice {kind!r}", param=param)
    if not tools or kind == "none":
        if kind not in (None, "none", "auto"):
            raise APIError(400, f"{param}: forces a tool call but no tools were given", param=param)
        return None
    with _choice_error(param):
        return callable_tools, tool_choice, kind, forced_tools(callable_tools, tool_choice)


@contextmanager
def _choice_error(param: str):
    """A ToolParserError (a choice of no offered tool) as the 400 naming `param`."""
    try:
        yield
    except ToolParserError as e:
        why = str(e).removeprefix("tool_choice ")
        raise APIError(400, f"{param}: {why}", param=param) from None


def _allowed_tools(tools: list[dict], choice: dict, param: str) -> tuple[list[dict], str]:
    """OpenAI's `{"type": "allowed_tools", "allowed_tools": {"mode", "tools"}}` -> (the callable
    subset of tools, "auto" or "required"). All tools stay in the prompt (it stays cacheable)."""
    spec = choice.get("allowed_tools")
    if not isinstance(spec, dict):
        raise APIError(400, f"{param}.allowed_tools: is required (an object with mode and tools)",
                       param=f"{param}.allowed_tools")
    mode = spec.get("mode", "auto")
    if mode not in ("auto", "required"):
        raise APIError(400, f"{param}.allowed_tools.mode: must be 'auto' or 'required', got {mode!r}",
                       param=f"{param}.allowed_tools.mode")
    wanted = spec.get("tools")
    if not isinstance(wanted, list) or not wanted:
        raise APIError(400, f"{param}.allowed_tools.tools: must be a non-empty list of tools",
                       param=f"{param}.allowed_tools.tools")
    offered = {t["function"]["name"]: t for t in tools}
    names = []
    for i, w in enumerate(wanted):
        fn = w.get("function") if isinstance(w, dict) else None
        name = fn.get("name") if isinstance(fn, dict) else (w.get("name") if isinstance(w, dict) else None)
        if name not in offered:
            where = f"{param}.allowed_tools.tools[{i}]"
            raise APIError(400, f"{where}: {name!r} is not one of the tools", param=where)
        names.append(name)
    return [offered[n] for n in dict.fromkeys(names)], mode


def guard_constraint(served, plan: ToolPlan, prompt_text: str, parallel: bool, guard) -> StructuredOutput | None:
    """The lazy call grammar of `tool_choice: auto` when the tool guard's mode has a grammar;
    None when a forced call has its own, or the format has no triggers."""
    if not guard.grammar or not plan.tools or plan.required:
        return None
    grammar = lazy_tool_grammar(plan.parse_format, plan.callable or [], parallel, reasoning=served.knows_reasoning,
                                starts_in_reasoning=served.starts_in_reasoning(prompt_text))
    return StructuredOutput(grammar=grammar) if grammar else None


def prompt_messages(served, plan: ToolPlan, messages: list[dict]) -> list[dict]:
    """The messages to render: unchanged for a template that takes tools; otherwise history's tool
    calls and results as hermes text and the tools described in the system message."""
    if served.template_supports_tools:
        return messages
    out = _flatten_history(messages)
    if plan.tools:
        prompt = tools_system_prompt(plan.tools)
        if out and out[0]["role"] == "system":
            out[0] = {**out[0], "content": f"{out[0]['content']}\n\n{prompt}"}
        else:
            out.insert(0, {"role": "system", "content": prompt})
    return out


def _flatten_history(messages: list[dict]) -> list[dict]:
    fmt = get_format(PROMPT_FORMAT)
    out: list[dict] = []
    for m in messages:
        if m["role"] == "assistant" and m.get("tool_calls"):
            calls = [f"{fmt.START}\n{_call_text(c['function'])}\n{fmt.END}" for c in m["tool_calls"]]
            text = "\n".join(([m["content"]] if m["content"] else []) + calls)
            out.append({k: v for k, v in m.items() if k != "tool_calls"} | {"content": text})
        elif m["role"] == "tool":
            response = f"<tool_response>\n{m['content']}\n</tool_response>"
            if out and out[-1].get("_tool_results"):
                out[-1]["content"] += "\n" + response
            else:
                out.append({"role": "user", "content": response, "_tool_results": True})
        else:
            out.append(m)
    return [{k: v for k, v in m.items() if k != "_tool_results"} for m in out]


def _call_text(fn: dict) -> str:
    """A history call as the model would have written it; raw (malformed) arguments stay verbatim."""
    args = fn["arguments"]
    args_text = json.dumps(args, ensure_ascii=False) if isinstance(args, dict) else str(args)
    return f'{{"name": {json.dumps(fn["name"], ensure_ascii=False)}, "arguments": {args_text}}}'


def _check_schema(schema, param: str) -> None:
    if schema is not None and not isinstance(schema, dict):
        raise APIError(400, f"{param}: must be a JSON schema object, not {_kind(schema)}", param=param)
    error = schema_error(schema) if schema else None
    if error:  # not JSON Schema (BFCL's "dict", "float"): no call grammar or validation can read it
        raise APIError(400, f"{param}: not a valid JSON schema: {error}", param=param)
