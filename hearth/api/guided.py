"""vLLM's structured-output request fields -> the engine's StructuredOutput, the same constraint that
`response_format` sets (llguidance: JSON schema, regex, Lark or GBNF grammar): `guided_json`, `guided_regex`,
`guided_choice`, `guided_grammar` and their newer spelling `structured_outputs: {json | regex | choice |
grammar | json_object: ...}`, and llama-server's `json_schema` and `grammar` (also on its /completion and
/infill). They were ignored (named only in x-hearth-ignored-fields); a request may hold one constraint, and a second is a 400 naming it, as is one the grammar engine cannot compile."""

from __future__ import annotations

from typing import Any

from hearth.api.errors import APIError
from hearth.sample.grammar import InvalidStructuredOutput, compile_grammar
from hearth.sampling_params import CONSTRAINT_KINDS as KINDS
from hearth.sampling_params import StructuredOutput


NO_OPS = frozenset({"disable_any_whitespace", "disable_fallback"})
"""structured_outputs' option keys that change nothing here (booleans, taken): hearth writes JSON without
whitespace between its tokens anyway, and has one grammar engine, so nothing to fall back from. They were
a 400 ("is not supported") for a vLLM client that sent them."""
LEGACY = {f"guided_{k}": k for k in ("json", "regex", "choice", "grammar")}
"""vLLM's older top-level fields -> their kind."""
LLAMA = {"json_schema": "json", "grammar": "grammar"}
"""llama-server's fields (its /completion, /infill and OpenAI routes): a schema ({} is any JSON value), a GBNF
grammar; "" (its default, which its old web UI sends) is none."""


def _given(body) -> list[tuple[str, str, Any]]:
    """(the field as the client wrote it, its kind, its value) of each constraint the body holds."""
    given = [(field, kind, v) for field, kind in (LEGACY | LLAMA).items()
             if (v := getattr(body, field, None)) is not None and not (field in LLAMA and v == "")]
    for key, v in (getattr(body, "structured_outputs", None) or {}).items():
        if key in NO_OPS:
            if not isinstance(v, bool) and v is not None:
                raise APIError(400, f"structured_outputs.{key}: must be a boolean, not {v!r}",
                               param=f"structured_outputs.{key}")
            continue
        if key not in KINDS:
            raise APIError(400, f"structured_outputs.{key}: is not supported (hearth reads {', '.join(KINDS)})",
                           param=f"structured_outputs.{key}")
        if v is not None and v is not False:
            given.append((f"structured_outputs.{key}", key, v))
    return given


def compiled(so: StructuredOutput | None, field: str) -> StructuredOutput | None:
    """so, its grammar compiled (hearth.sample.grammar: no tokenizer needed, so a route checks it before its model
    loads; the engine's own compile then finds it kept), or a 400 naming `field`, the one it came in."""
    if so is not None:
        try:
            compile_grammar(so)
        except InvalidStructuredOutput as e:
            raise APIError(400, f"{field}: {e}", param=field) from None
    return so


def guided(body, others: dict[str, StructuredOutput | bool | None]) -> StructuredOutput | bool | None:
    """The constraint of the body's vLLM fields, or the one of `others` ({field: constraint}:
    response_format, a tool_choice that forces a call); two constraints are a 400 naming the second. Needs no
    model: a route runs it before the load with the formats it has then (True: a forced call, whose grammar the
    loaded model's tool format gives), and again with the forced call's grammar."""
    fields = [(f, so) for f, so in others.items() if so is not None]
    for field, kind, value in _given(body):
        try:
            so = KINDS[kind](value)
            if so is not None:
                compile_grammar(so)  # a bad regex or grammar names its field, not "invalid regex" alone
        except (ValueError, InvalidStructuredOutput) as e:
            raise APIError(400, f"{field}: {e}", param=field) from None
        fields.append((field, so))
    if len(fields) > 1:
        (first, _), (second, _) = fields[:2]
        raise APIError(400, f"{second}: cannot be combined with {first} (one constraint per request)", param=second)
    return fields[0][1] if fields else None
