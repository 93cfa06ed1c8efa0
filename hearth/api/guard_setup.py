"""What a request with tools hands the tool guard (hearth.api.guarded runs its attempts): the engine,
the prompt, the callable tools' schemas, the call grammars and the parser that reads each attempt."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from hearth.api.model_holds import Holds
from hearth.sampling_params import SamplingParams, StructuredOutput
from hearth.tool_guard import GuardConfig
from hearth.tool_guard.guard_event import GuardEvent, GuardLog
from hearth.tool_guard.held import schema_held
from hearth.tool_guard.repeats import PastCall
from hearth.tool_guard.rescue_parser import RescuingParser
from hearth.tool_parsers import OutputParser, call_constraint
from hearth.tool_parsers.types import tool_parameters


@dataclass(slots=True)
class GuardSetup:
    """What the route hands the guard for one request."""
    engine: object
    metrics: object
    prompt_ids: list[int]
    params: SamplingParams
    make_parser: Callable[[GuardLog, bool], object]
    """A fresh OutputParser that accepts any tool name (the guard checks names itself); in guard
    mode it rescues calls of offered tools from text, logging them."""
    schemas: dict[str, dict]
    """Callable tool name -> its arguments schema."""
    required: bool
    fmt: str
    grammar: str
    """"lazy", "forced" or "none": what the first attempt's params carry."""
    forced: StructuredOutput | None
    """The call grammar from the first token, for resampling a failed call."""
    reprompt: Callable[[list[dict]], list[int]]
    """Extra OpenAI messages -> the prompt ids of the conversation with them appended."""
    config: GuardConfig
    token_bytes: Callable[[int], bytes]
    client_logprobs: bool
    request_id: str
    events: list[GuardEvent] = field(default_factory=list)
    """What the request-side parts did (tools_ranked, compacted: also a re-prompt's compaction),
    the request's log itself: read when a choice ends."""
    policy: object | None = None
    """hearth.workflow's review (hearth.api.guard_extras.Policy), or None."""
    parallel: bool = True
    """parallel_tool_calls: false ends the lazy grammar after one call."""
    streaming: bool = False
    """The client streams: only then does a held call go out while written (and bar later re-prompts)."""
    held: frozenset[str] = frozenset()
    """The callable tools whose schemas the call grammars hold (hearth.tool_guard.held)."""
    last_step: list[PastCall] = field(default_factory=list)
    """The last assistant turn's calls, when the conversation ends with their results: in guard mode
    an attempt that makes one again after an error result, or after the same result twice in a row,
    is re-prompted once with the result (hearth.tool_guard.repeats)."""
    holds: Holds | None = None
    """The served model's holds: the choices hold it from their first attempt to their end, retries between."""


def guard_setup(served, metrics, plan, prompt: str, ids: list[int], params: SamplingParams, config: GuardConfig,
                client_logprobs: bool, grammar: str, reprompt: Callable[[list[dict]], list[int]]) -> GuardSetup:
    """The setup of a request with tools under `config` (grammar or guard)."""
    callable_tools = plan.callable or []
    forced = plan.constraint
    if forced is None and config.retries:
        forced = StructuredOutput(grammar=call_constraint(plan.parse_format, callable_tools, "required").lark())
    # the guard sees calls of unknown tools (to retry them); the grammar alone parses as the server always did
    guard = config.mode == "guard"
    tools = None if guard else plan.tools
    starts = served.starts_in_reasoning(prompt)

    def make_parser(log: GuardLog, announce: bool):
        parser = OutputParser(plan.parse_format, tools, reasoning=served.knows_reasoning or starts, starts_in_reasoning=starts,
                              announce=announce, required=plan.required, named=plan.named, channels=served.channels,
                              marks=served.reasoning_marks)
        return RescuingParser(parser, callable_tools, log) if guard and callable_tools else parser

    token_bytes = getattr(served.tokenizer, "token_to_bytes", None) or (lambda t: served.tokenizer.decode([t]).encode())
    schemas = tool_parameters(callable_tools)
    held = frozenset(n for n, schema in schemas.items() if schema_held(schema))
    return GuardSetup(served.engine, metrics, ids, params, make_parser, schemas, plan.required, plan.parse_format,
                      grammar, forced, reprompt, config, token_bytes, client_logprobs, uuid.uuid4().hex, held=held,
                      holds=served.holds)
