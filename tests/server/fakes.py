"""A scripted stand-in for the engine, so route-level tests can make "the model" say exactly what a
case needs (tool calls, reasoning, malformed output, a failing step) with no model loaded.

The fake tokenizer maps characters to code points. The fake engine decodes the prompt, finds the
last `script:NAME` in it and streams SCRIPTS[NAME] one piece per output; without a marker it
echoes "ok". `script:fail` raises EngineStepError after one piece (`script:shutdown`: EngineShutdownError); `script:slow` never ends."""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass

from hearth.api.app import ServerConfig, create_app
from hearth.api.chat_template import ChatTemplate
from hearth.api.served import ServedModel
from hearth.engine.async_engine import EngineFullError, EngineShutdownError, EngineStats, EngineStepError
from hearth.engine.engine_core import check_request
from hearth.outputs import EngineOutput

WEATHER_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
SCRIPTS = {
    "hello": ["Hel", "lo ", "there", "!"],
    "chars": ["H", "i", "!"],
    # the characters str.splitlines (httpx's iter_lines, the ollama client's reader) breaks a line at and JSON
    # may leave raw in a string
    "line_breaks": ["one\u2028two", "\u2029three\x85", "four"],
    "tool": ["Let me check.", "\n<tool_", 'call>\n{"name": "get_weather", ', '"arguments": {"city": "Paris"}}',
             "\n</tool_call>"],
    "tool_pieces": ['<tool_call>\n{"name": "get_weather", "arguments": {"ci', 'ty": "Pa', 'ris", "da', 'ys": 3',
                    "}}\n</tool_call>"],
    "two_tools": [WEATHER_CALL, "\n", WEATHER_CALL.replace("Paris", "Rome")],
    "tool_then_text": [WEATHER_CALL, "\nI asked for the weather."],
    # text, then a call whose arguments come in pieces, as the tool guard streams a held call
    "guard_stream": ["Let me ", "check.", '\n<tool_call>\n{"name": "get_weather", "arguments": {"ci', 'ty": "Pa',
                     'ris", "da', 'ys": 3', "}}\n</tool_call>"],
    # a call in prose, without the format's markers: only the guard's rescue finds it, at the end
    "guard_prose": ["I will look it up: ", '{"name": "get_weather", "arguments": {"city": "Paris"}}', "\n"],
    # a call that opens the answer as a fence, in pieces (a lead: free text may follow it)
    "guard_fence": ['```json\n{"name": "get_weather", "arguments": {"ci', 'ty": "Pa', 'ris"}}\n```'],
    "bad_tool": ["<tool_call>\n{'name': 'get_weather', 'args': {'city': 'Oslo',},}\n</tool_call>"],
    "broken_tool": ["<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": ", "</tool_call>"],
    "fenced_tool": ['<tool_call>\n```json\n{"name": "get_weather", "arguments": {"city": "Lima"}}\n```\n</tool_call>'],
    # a forced call, one piece a token: max_tokens k cuts it after k pieces (tests/server/test_cut_calls.py)
    "cut_call": ["<tool_", "call>\n", '{"name": "get_', 'time", ', '"arguments": {', '\n   "', 'tz": "Asia/To', 'kyo"}}',
                 "\n</tool_call>"],
    # a call in prose that max_tokens cuts after 2 pieces: no rescue may close it (test_cut_calls.py)
    "prose_cut": ["I will look it up: ", '{"name": "get_weather", "arguments": {"city": "Pa', 'ris"}}', " now."],
    # an XML call body that max_tokens cuts after 1 piece (test_cut_calls.py)
    "xml_cut": ["<tool_call>\n<function=get_weather>\n<parameter=city>\nPa", "ris\n</parameter>\n</function>\n</tool_call>"],
    "think": ["<think>", "The user", " wants a greeting.", "</think>", "Hi", "!"],
    "think_tool": ["<think>Need weather.</think>", WEATHER_CALL],
    "unclosed_think": ["<think>", "still thinking"],
    "json": ['{"answer": ', '"yes"}'],
    "markdown": ["## Fibonacci\n\nThe **fast** way uses ", "`a, b = b, a + b`:\n\n", "1. start at *zero*\n",
                 "2. add\n\n```python\ndef fib(n):\n", "    a, b = 0, 1  # the first two\n",
                 "    for _ in range(n):\n        a, b = b, a + b\n    return a\n```\n", "See [the docs](https://docs.python.org/3/)."],
    # a block, then a line back at the margin: /infill's n_indent 4 ends it there (tests/server/test_infill.py)
    "indent": ["a = 1\n", "    b = 2\n", "    c = 3\n", "d = 4\n", "e = 5\n", "f"],
    "fail": ["partial"],
    "slow": ["tick"],
}
# scripts whose k-th request (a retry of the tool guard is another request) says ATTEMPTS[name][k];
# past the end it says the last one again
ATTEMPTS = {
    "guard_unknown": [["Let me check.", "\n<tool_call>\n{\"name\": \"get_wether\", \"arguments\": {\"city\": \"Paris\"}}",
                       "\n</tool_call>"], [WEATHER_CALL]],
    "guard_bad_args": [['<tool_call>\n{"name": "get_weather", "arguments": {"town": "Paris"}}\n</tool_call>'],
                       ['<tool_call>\n{"name": "get_weather", "arguments": {"city": 7}}\n</tool_call>'],
                       [WEATHER_CALL]],
    "guard_coerce": [['<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "days": "3"}}\n</tool_call>']],
    "guard_text": [["It is sunny."], [WEATHER_CALL]],
    "guard_second_bad": [[WEATHER_CALL, "\n", '<tool_call>\n{"name": "get_wether", "arguments": {}}\n</tool_call>'],
                         [WEATHER_CALL.replace("Paris", "Rome")]],
    # a number no double holds (json.dumps wrote it as Infinity, which is not JSON): not a call
    "guard_overflow": [['<tool_call>\n{"name": "get_weather", "arguments": {"days": 1e400, "city": "Paris"}}\n</tool_call>'],
                       [WEATHER_CALL]],
    "guard_never": [['<tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call>']],
    # a call that streams, then one of another tool that fails its schema, twice
    "guard_later_bad": [[WEATHER_CALL, "\n", '<tool_call>\n{"name": "add", "arguments": {"a": "x"}}\n</tool_call>'],
                        ['<tool_call>\n{"name": "add", "arguments": {"a": "y"}}\n</tool_call>']],
    # an answer opened as a fenced call whose name the lazy grammar bent to an offered tool: the
    # model gave the name's first token almost nothing before the grammar's mask (RAW_LOGPROBS),
    # though over the allowed tokens it was sure (LOGPROBS); the same with a name the model chose
    # (its second request: the model's own answer from the opener on, without the grammar, once declined)
    "guard_forced_name": [['```json\n{"name": "', "get_weather", '", "arguments": {"city": "Paris"}}\n```'],
                          ['```json\n{"name": "', "triangle_area", '", "arguments": {"base": 3}}\n```']],
    "guard_sure_name": [['```json\n{"name": "', "get_weather", '", "arguments": {"city": "Paris"}}\n```']],
    # the name bent after its first token: the model's `get` went on as `_frequency` (BFCL irrelevance_36
    # on Qwen2.5-Coder-1.5B, only get_dominant_trait offered), the grammar made it `_weather`; its second
    # request: the model's own answer from the opener on, once declined
    "guard_bent_late": [['```json\n{"name": "', "get", "_weather", '", "arguments": {"city": "Paris"}}\n```'],
                        ['```json\n{"name": "', "get", "_frequency", '", "arguments": {"gene": "rs7412"}}\n```']],
    # the same name, the model torn at `_weather` between offered tools (raw 0.30, 0.50 of what the
    # grammar allowed, so 0.61 of its probability went to allowed tokens): its own choice, a call
    "guard_sure_late": [['```json\n{"name": "', "get", "_weather", '", "arguments": {"city": "Paris"}}\n```']],
    # doubled braces opening the answer: a good call, then one of no offered tool (the resample starts over)
    "guard_doubled_second_bad": [['{{"name": "get_weather", "arguments": {"city": "Paris"}}}', "\n",
                                  '{{"name": "get_wether", "arguments": {}}}'], [WEATHER_CALL.replace("Paris", "Rome")]],
    # Qwen's doubled-brace call opening the answer, then another: the model's own name, then a bent one
    # (its second request: the model's own text from the end of the token "get_weather", the last whole one
    # before the second call's opener, once that call is declined)
    "guard_doubled_two": [['{{"name": "', "get_weather", '", "arguments": {"city": "Paris"}}}\n{{"name": "',
                           "get_weather", '", "arguments": {"city": "Rome"}}}'],
                          ['", "arguments": {"city": "Paris"}}}\n{{"name": "', "hotel_rooms", '", "arguments": {}}}']],
    # the trial's case (Qwen2.5-Coder-0.5B asked for a joke, one tool get_weather): a bare object the
    # grammar bent to get_weather, text after it; its second request: the model's own answer
    "guard_bent_joke": [['{"name": "', "get_weather", '", "arguments": {"city": "New York"}}', "\nEnjoy the weather!"],
                        ['{"name": "', "Cat Joke", '", "arguments": {"cat": "Meow"}}']],
    # the same bent name, its arguments failing the schema: resampled, not declined
    "guard_bent_bad_args": [['<tool_call>\n{"name": "', "get_weather", '", "arguments": {"town": "Rome"}}\n</tool_call>',
                             "\nDone."],
                            [WEATHER_CALL]],
    # the call of the conversation's last step again (its result ignored), then an answer from the result
    "guard_repeat": [[WEATHER_CALL], ["It is sunny in Paris."]],
    "guard_repeat_again": [[WEATHER_CALL]],
}
LOGPROBS = {("guard_forced_name", 1): -0.01, ("guard_sure_name", 1): -0.05, ("router_unsure_opener", 0): -2.0,
            ("guard_bent_late", 1): -0.05, ("guard_bent_late", 2): -0.01, ("guard_sure_late", 1): -0.05,
            ("guard_sure_late", 2): -0.7, ("guard_doubled_two", 1): -0.01, ("guard_doubled_two", 3): -0.01,
            ("guard_bent_joke", 1): -0.01,
            ("router_unsure_name", 2): -2.0, ("router_unsure_arguments", 1): -0.01, ("router_unsure_arguments", 2): -0.01,
            ("router_unsure_arguments", 4): -2.0, ("router_sure_name", 1): -0.01, ("router_sure_name", 2): -0.01,
            ("router_unsure_city", 1): -0.01, ("router_unsure_city", 4): -2.0}
"""(script, piece index) -> the sampled token's logprob there (else -0.5)."""
RAW_LOGPROBS = {("guard_forced_name", 1): -6.0, ("guard_sure_name", 1): -0.2, ("guard_doubled_two", 1): -0.2,
                ("guard_doubled_two", 3): -6.0, ("guard_bent_joke", 1): -7.0,
                ("guard_bent_bad_args", 1): -7.0, ("guard_bent_late", 1): -0.2, ("guard_bent_late", 2): -5.0,
                ("guard_sure_late", 1): -0.2, ("guard_sure_late", 2): -1.2}
"""(script, piece index) -> its raw logprob, before the grammar's mask (else its logprob); sent only
when the request asks for raw logprobs (SamplingParams.raw_logprobs)."""
PACED = {"markdown": 0.05}
"""Seconds between a script's pieces, where a client must see them arrive apart (the chat page's tok/s)."""
TEMPLATE = """{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}# Tools
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>
Call a tool as <tool_call>{"name": ..., "arguments": ...}</tool_call><|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for message in messages if message.role != 'system' %}<|im_start|>{{ message.role }}
{% if message.reasoning_content %}<think>{{ message.reasoning_content }}</think>{% endif %}
{{- message.content }}
{%- for tc in message.tool_calls or [] %}<tool_call>
{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments | tojson }}}
</tool_call>{% endfor %}<|im_end|>
{% endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""
CHATML_NO_TOOLS = """{% for message in messages %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""


class FakeTokenizer:
    bos_token, eos_token, add_bos = None, "<|im_end|>", False

    def encode(self, text: str, add_special_tokens: bool = True, parse_special: bool = False) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(i) for i in ids)

    def token_to_bytes(self, i: int) -> bytes:
        return chr(i).encode()


@dataclass
class Added:
    prompt: str
    params: object
    request_id: str


class FakeStream:
    def __init__(self, engine: FakeEngine, rid: str, pieces: list[str], script: str, prompt_ids: list[int], params):
        self.engine, self.request_id, self.finished = engine, rid, False
        self.pieces, self.script, self.n_prompt, self.params = pieces, script, len(prompt_ids), params
        self.prompt_ids = prompt_ids
        self.sent = 0

    def __aiter__(self):
        return self

    async def __anext__(self) -> EngineOutput:
        if self.finished:
            raise StopAsyncIteration
        await asyncio.sleep(PACED.get(self.script, 0.001))
        if self.script == "slow":
            await asyncio.sleep(0.02 if self.sent < 3 else 3600)
        elif self.script == "fail" and self.sent == 1:
            self._end()
            raise EngineStepError("engine step failed: RuntimeError: boom")
        elif self.script == "shutdown" and self.sent == 1:  # as AsyncEngine.end_streams ends it
            self._end()
            raise EngineShutdownError("the server is shutting down")
        piece = self.pieces[self.sent % len(self.pieces)]
        self.sent += 1
        limit = self.params.max_tokens or 10**9
        done = self.script not in ("slow", "fail", "shutdown") and (self.sent >= len(self.pieces) or self.sent >= limit)
        reason = ("length" if self.sent >= limit and self.sent < len(self.pieces) else "stop") if done else None
        lp = LOGPROBS.get((self.script, self.sent - 1), -0.5)
        logprobs = [{ord(piece[0]) if piece else 0: lp, 65: -1.0, 66: -2.0}] if self.params.logprobs is not None else None
        raw = [RAW_LOGPROBS.get((self.script, self.sent - 1), lp)] if self.params.raw_logprobs else None
        # prompt logprobs (first output): token i's is -i/100, its alternatives "A" and "B" as above; ranks 1
        asked = self.params.prompt_logprobs is not None and self.sent == 1
        prompt = ([None] + [{t: -i / 100, 65: -1.0, 66: -2.0} for i, t in enumerate(self.prompt_ids[1:], 1)]
                  if asked else None)
        if done:
            self._end()
        return EngineOutput(self.request_id, [ord(piece[0]) if piece else 0], piece, done, reason,
                            new_logprobs=logprobs, new_raw_logprobs=raw, num_prompt_tokens=self.n_prompt,
                            num_cached_tokens=self.engine.cached, prompt_logprobs=prompt,
                            prompt_ranks=[None] + [1] * (self.n_prompt - 1) if asked else None)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        self.abort()

    def abort(self) -> None:
        if not self.finished:
            self._end()
            self.engine.aborted.append(self.request_id)

    def _end(self) -> None:
        self.finished = True
        self.engine.live.discard(self.request_id)


class FakeEngine:
    def __init__(self, max_model_len: int = 4096, max_in_flight: int = 64, vocab_size: int = 0x110000,
                 model_context: int | None = None):
        """vocab_size: one token a character, as FakeTokenizer (fake_served's). model_context: the
        model's own context (None: unknown, as before; the errors then offer a larger one)."""
        self.max_model_len, self.max_in_flight, self.vocab_size = max_model_len, max_in_flight, vocab_size
        self.model_context = model_context
        self.total_slots, self.speculative = 1, False  # what /props reads of an engine
        self.added: list[Added] = []
        self.aborted: list[str] = []
        self.live: set[str] = set()
        self.cached = 0
        self.started = self.stopped = False
        self.attempts: dict[str, int] = {}

    def start(self) -> None:
        self.started = True

    def shutdown(self) -> None:
        self.stopped = True

    def add_request(self, prompt_ids, params, request_id=None, media=()) -> FakeStream:
        check_request(prompt_ids, params, self.max_model_len, self.vocab_size, self.model_context)  # the real engine's
        if len(self.live) >= self.max_in_flight:
            raise EngineFullError(f"{len(self.live)} requests are in flight (limit {self.max_in_flight}); retry later")
        prompt = "".join(chr(i) for i in prompt_ids)
        self.added.append(Added(prompt, params, request_id))
        self.live.add(request_id)
        found = re.findall(r"script:([a-z_]+)", prompt)
        script = found[-1] if found else ""
        pieces = SCRIPTS.get(script, ["ok"])
        if script in ATTEMPTS:
            k = self.attempts[script] = self.attempts.get(script, -1) + 1
            pieces = ATTEMPTS[script][min(k, len(ATTEMPTS[script]) - 1)]
        return FakeStream(self, request_id, pieces, script, list(prompt_ids), params)

    @property
    def num_in_flight(self) -> int:
        return len(self.live)

    def stats(self) -> EngineStats:
        return EngineStats(len(self.live), 0, 2 * len(self.live), 100, 10, 4)


def fake_served(template: str = TEMPLATE, engine: FakeEngine | None = None, names=("fake-model",)) -> ServedModel:
    engine = engine or FakeEngine()
    return ServedModel(list(names), FakeTokenizer(), ChatTemplate(template, None, "<|im_end|>", "llama"),
                       engine, engine.max_model_len, vocab_size=0x110000, model_context=engine.model_context)


def fake_app(template: str = TEMPLATE, engine: FakeEngine | None = None, names=("fake-model",), **config):
    served = fake_served(template, engine, names)
    return create_app(served, ServerConfig(**config)), served.engine
