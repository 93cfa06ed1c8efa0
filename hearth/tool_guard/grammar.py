"""The grammar of a tool-calling turn, as llguidance Lark (hearth.sample.grammar compiles it).

`tool_choice: auto` gets a lazy grammar (llama.cpp's lazy grammars, llguidance's lazy lexemes):
the output is free text until a trigger (hearth.tool_guard.triggers) completes; from there the rest
is one call of an offered tool, its arguments valid against the tool's schema. The grammar works on
bytes, so a token that straddles a trigger (`.<tool` `_call>\\n{"`) is matched across the boundary
with nothing replayed by hand. A `<think>` region at the start stays free: triggers count only
after it. `parallel=False` ends the output after one call. `required` and named calls keep the
forced grammar of hearth.tool_parsers.schema, constrained from the first token."""

from __future__ import annotations

import json
import re

from hearth.sample.schema_lark import CALL_LAYOUT, with_terminals
from hearth.tool_guard.triggers import (ARGUMENTS_KEY, FUNCTION_TAG, GEMMA, NAMED, OPEN_OBJECT, TAGGED, Trigger,
                                        triggers_for)
from hearth.tool_parsers.gemma4 import END as GEMMA_END
from hearth.tool_parsers.gemma4_grammar import call_rules
from hearth.tool_parsers.reasoning import MARKERS
from hearth.tool_parsers.schema import declared_only, json_rules
from hearth.tool_parsers.types import tool_parameters

# one gap of layout inside a call: bounded, so a small model cannot pad with newlines forever
_GAP = f"/{CALL_LAYOUT}/"
# a reasoning channel at the start of the output, any of the marks hearth.tool_parsers.reasoning reads
_OPENS = "|".join(re.escape(m.open).replace("/", "\\/") for m in MARKERS)
_THOUGHT = "|".join(f"{re.escape(m.open)}(.|\\n)*{re.escape(m.close)}".replace("/", "\\/") for m in MARKERS)


def lazy_tool_grammar(fmt: str, tools: list[dict], parallel: bool = True, reasoning: bool = False,
                      starts_in_reasoning: bool = False) -> str | None:
    """The lazy grammar for `tools` (already narrowed to the callable ones) in format `fmt`;
    None when the format has no triggers or no tools are callable.
    reasoning: an output may open with `<think>` (the template knows a reasoning channel);
    starts_in_reasoning: the prompt opened it, the output starts inside it."""
    params = tool_parameters(tools)
    triggers = triggers_for(fmt)
    if not params or not triggers:
        return None
    key = ARGUMENTS_KEY.get(fmt, "arguments")
    anywhere = [t for t in triggers if not t.at_start]
    lines = ["%llguidance {}", "TEXT: /(.|\\n)*/",
             # the first text of a reasoning-aware output: anything but an opening reasoning mark
             f"TEXT0: /(.|\\n)*/ & ~/[ \\t\\n]*({_OPENS})(.|\\n)*/",
             f"ARGS_GAP: {_GAP}", "END_WS: /[ \\t\\n]*/"]
    lines += _tool_rules(params, key)
    lines += _named_rules(params, [t for t in triggers if t.body == NAMED])
    if any(t.body == GEMMA for t in triggers):
        lines += call_rules({name: declared_only(schema) for name, schema in params.items()}, "gemma_call")
    lines += _call_rules(anywhere, "TEXT", "")
    lines += _call_rules(anywhere, "TEXT0", "0")
    lines += _start_rules(triggers, bool(anywhere), parallel)
    lines += _entry(reasoning, starts_in_reasoning)
    return "\n".join(with_terminals(lines)) + "\n"


def _tool_rules(params: dict[str, dict], key: str) -> list[str]:
    """`object`: a whole call object; `rest`: the object after `{"name"`; `fn_rest`: the
    `<function=` form after its `=`. One branch per tool pins its name to its own arguments."""
    rules, rest, fn = [], [], []
    for i, (name, schema) in enumerate(params.items()):
        quoted = json.dumps(json.dumps(name))  # the JSON string "name", as a Lark literal
        rules += json_rules(f"args_{i}", declared_only(schema))
        rules.append(f'rest_{i}: ":" ARGS_GAP {quoted} ARGS_GAP "," ARGS_GAP "\\"{key}\\"" ARGS_GAP ":" '
                     f"ARGS_GAP args_{i} ARGS_GAP")
        rest.append(f"rest_{i}")
        fn.append(f'{json.dumps(name)} ">" ARGS_GAP args_{i} ARGS_GAP "</function>"')
    return rules + ['object: "{" ARGS_GAP "\\"name\\"" ARGS_GAP rest', f"rest: {' | '.join(rest)}",
                    f"fn_rest: {' | '.join(fn)}"]


def _named_rules(params: dict[str, dict], triggers: list[Trigger]) -> list[str]:
    """`named_{trigger}`: a call after a NAMED trigger, the name pinned to its own arguments (args_i)."""
    rules = []
    for t in triggers:
        branches = [f"{json.dumps(name)} {json.dumps(t.between)} args_{i}" for i, name in enumerate(params)]
        rules.append(f"named_{t.name}: {' | '.join(branches)}")
    return rules


_BODIES = {
    TAGGED: lambda t: f'/[ \\t\\n]{{0,2}}/ object "}}" /[ \\t\\n]{{0,2}}/ "</tool_call>"',
    OPEN_OBJECT: lambda t: f"rest {t.close}",
    FUNCTION_TAG: lambda t: "fn_rest",
    NAMED: lambda t: f"named_{t.name}",
    GEMMA: lambda t: f"gemma_call {json.dumps(GEMMA_END)}",
}
"""What follows a trigger of each body kind, up to the end of the call."""


def _body(t: Trigger) -> str:
    return _BODIES[t.body](t)


def _call_rules(anywhere: list[Trigger], text: str, suffix: str) -> list[str]:
    """`call{suffix}`: free text up to a trigger (a lazy lexeme: it ends where the trigger does,
    which commits the parse to the call), then the call."""
    if not anywhere:
        return []
    out = []
    for i, t in enumerate(anywhere):
        out.append(f"trig{suffix}_{i}[lazy]: {text} {t.lark}")
        out.append(f"call{suffix}_{i}: trig{suffix}_{i} {_body(t)}")
    out.append(f"call{suffix}: {' | '.join(f'call{suffix}_{i}' for i in range(len(anywhere)))}")
    return out


def _start_rules(triggers: list[Trigger], anywhere: bool, parallel: bool) -> list[str]:
    """`main` / `main0` (first text without `<think>`): calls anywhere; openers that count only at
    the start of the output begin `lead`, a call the parser reads from an output's first byte."""
    at_start = [t for t in triggers if t.at_start]
    after = ("(call)* TEXT" if anywhere else "TEXT") if parallel else "END_WS"
    # one call the lead's way: `lead (lead)*` would hold every later `{"` to a call, and Qwen2.5-Coder
    # writes `{"response": ...}` after a call it repeats (an agent's turn ran to max_tokens)
    leads = "lead"
    rules = []
    for suffix, text in (("", "TEXT"), ("0", "TEXT0")):
        alts = [text] + ([f"call{suffix} {after}"] if anywhere else [])
        if at_start:
            alts.append(f"{leads} {after}")
        rules.append(f"main{suffix}: {' | '.join(alts)}")
    for i, t in enumerate(at_start):
        rules.append(f"lead_trig_{i}[lazy]: {t.lark}")
        rules.append(f"lead_{i}: lead_trig_{i} {_body(t)}")
    if at_start:
        rules.append(f"lead: {' | '.join(f'lead_{i}' for i in range(len(at_start)))}")
    return rules


def _entry(reasoning: bool, starts_in_reasoning: bool) -> list[str]:
    if starts_in_reasoning:  # free until </think>; an output that never closes it stays free
        return ['think_rest[lazy]: /(.|\\n)*<\\/think>/', "start: think_rest main | TEXT"]
    if reasoning:
        return [f"think[lazy]: /[ \\t\\n]*({_THOUGHT})/", "start: think main | main0"]
    return ["start: main"]
