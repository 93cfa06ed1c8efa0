"""Structured output: a StructuredOutput becomes an llguidance grammar; a GrammarMatcher per request
says which tokens may come next (a bitmask) and follows the tokens actually sampled.

No torch here: the engine validates grammars with it when a request arrives (an invalid schema is
the client's error), the runner turns the bitmask into a logit mask."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
import threading

import llguidance
from llguidance.gbnf_to_lark import gbnf_to_lark

from hearth.errors import HearthError
from hearth.sample.regex_ascii import ascii_classes
from hearth.sample.schema_bounds import ANY_OBJECT, with_bounded_numbers
from hearth.sample.schema_closed import closed_objects
from hearth.sample.schema_lark import value_rules, with_terminals
from hearth.sampling_params import StructuredOutput


class InvalidStructuredOutput(HearthError):
    """A JSON schema, grammar or regex the grammar engine cannot compile; `kind` says which (the API
    names the request field that held it)."""

    def __init__(self, message: str, kind: str = "json_schema"):
        super().__init__(message)
        self.kind = kind


class GrammarStopped(InvalidStructuredOutput):
    """The grammar engine gave up mid-answer: llguidance's limits on a parser row or on the lexer, which
    a compile does not check (`root ::= "w0" | ... | "w19999"` compiles, then stops after the `w`). Its
    mask then allows only the end, and the answer ended there, cut and invalid, as if whole."""


def constraint_kind(so: StructuredOutput) -> str:
    """The field that holds the constraint (the API names the request field from it)."""
    return "json_schema" if so.json_schema is not None else "json_object" if so.json_object else \
        "grammar" if so.grammar is not None else "regex"


def stopped(so: StructuredOutput, error: str) -> GrammarStopped:
    """The error of a request whose grammar engine gave up (llguidance's first line: the reason; the
    rest is its state and the grammar)."""
    kind = constraint_kind(so)
    reason = error.strip().splitlines()[0] if error.strip() else "no reason given"
    return GrammarStopped(f"the grammar engine gave up mid-answer, the {kind} being too complex for it: {reason}", kind)


def compile_grammar(so: StructuredOutput) -> str:
    """The llguidance grammar for a constraint; raises InvalidStructuredOutput naming the problem.
    A request's constraint is compiled where the API checks it, where the engine admits it and where
    its matcher is made, and an agent sends the same tools every turn: the compiled text is kept
    (~1-8 ms a compile; errors are not kept)."""
    # the key keeps the properties' order: it is the order the fields are written in
    return _compile(json.dumps([so.json_schema, so.json_object, so.grammar, so.regex]))


@functools.lru_cache(maxsize=64)  # a 100-tool call grammar and its key: ~0.3 MB
def _compile(key: str) -> str:
    json_schema, json_object, grammar, regex = json.loads(key)
    if json_schema is not None:
        return _from_schema(json_schema)  # validated there: its bounded copy's compile is the check
    if json_object:
        return _from_schema(ANY_OBJECT)
    if grammar is not None:
        kind, grammar = "grammar", _from_grammar(grammar)
    else:
        kind, grammar = "regex", llguidance.LLMatcher.grammar_from_regex(ascii_classes(regex))
    error = llguidance.LLMatcher.validate_grammar(grammar)
    if error:
        expected = GRAMMAR_SYNTAX if kind == "grammar" else ""
        raise InvalidStructuredOutput(f"invalid {kind}{expected}: {_reason(error)}", kind)
    return grammar


GRAMMAR_SYNTAX = " (expected Lark in llguidance's dialect, with a `start:` rule, or GBNF, with a `root ::=` rule)"
REASON_CHARS = 400


GBNF_RULE = re.compile(r"(?m)^\s*[\w-]+\s*::=")
"""A GBNF rule's definition opening a line (Lark writes `name:`): such a text is GBNF. llguidance's
own test (a line opening `start:`) took `start ::= ...` for Lark and refused the grammar."""

# GBNF's literals, character classes and comments (kept as they are), else a rule name `start`
_GBNF_START = re.compile(r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]|#[^\n]*|(?<![\w-])start(?![\w-])')


def _from_grammar(text: str) -> str:
    """Lark in llguidance's dialect, or GBNF (llama.cpp's, vLLM's guided_grammar takes it too)
    converted by llguidance itself (gbnf_to_lark, whose error then says what is wrong)."""
    if not GBNF_RULE.search(text):
        return llguidance.LLMatcher.grammar_from_lark(text)
    try:
        return llguidance.LLMatcher.grammar_from_lark(gbnf_to_lark(_rename_start(text)))
    except Exception as e:  # the converter raises bare Exceptions (an unknown rule) beside its own
        raise InvalidStructuredOutput(f"invalid grammar{GRAMMAR_SYNTAX}: {_reason(str(e))}", "grammar") from None


def _rename_start(text: str) -> str:
    """GBNF's `root` becomes Lark's `start` in the conversion, which then refused a rule of the
    user's named `start` ("Rule 'start' already exists"): that one gets a name the text lacks."""
    fresh = "start-gbnf"
    while fresh.replace("-", "_") in text.replace("-", "_").lower():
        fresh += "-x"
    return _GBNF_START.sub(lambda m: fresh if m.group() == "start" else m.group(), text)


def _reason(error: str) -> str:
    """llguidance's error in one line: its lines joined, the caret lines dropped (they point into a
    layout a one-line message loses), at most REASON_CHARS (the first line alone lost the reason:
    'regex parse error:' without 'unclosed group')."""
    lines = [line.strip() for line in error.strip().splitlines()]
    text = "; ".join(line for line in lines if line.strip("^ "))
    return text if len(text) <= REASON_CHARS else text[:REASON_CHARS - 1] + "…"


def _from_schema(schema: dict) -> str:
    """The validated grammar of the schema with its objects closed (hearth.sample.schema_closed) and
    bounded numbers, or without the bounds where the bounded copy does not compile (hearth.sample.schema_bounds)."""
    if not isinstance(schema, dict):
        raise InvalidStructuredOutput(f"invalid json_schema: a schema is a JSON object, not {type(schema).__name__}")
    closed = closed_objects(schema)
    try:
        return _with_exponents(closed) or with_bounded_numbers(closed, _schema_grammar)
    except ValueError as e:
        raise InvalidStructuredOutput(f"invalid json_schema: {_reason(str(e))}") from None


COMPACT = {"whitespace_flexible": False}
"""Whitespace as compact JSON allows: small models otherwise pad with newlines forever."""


def _schema_grammar(schema: dict) -> str:
    grammar = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema), overrides=COMPACT)
    error = llguidance.LLMatcher.validate_grammar(grammar)
    if error:
        raise ValueError(error)
    return grammar


def _with_exponents(schema) -> str | None:
    """The schema's grammar with its plain numbers keeping an exponent (hearth.sample.schema_lark); None
    where it has none, or where that grammar does not compile (the one-%json path then says why)."""
    rules = value_rules("start", schema, _bounded_compact, gap=False)
    if rules[0].startswith("start: %json"):  # nothing spelled out
        return None
    grammar = llguidance.LLMatcher.grammar_from_lark("\n".join(with_terminals(rules)))
    return None if llguidance.LLMatcher.validate_grammar(grammar) else grammar


def _bounded_compact(schema: dict) -> dict:
    """A sub-value's `%json` schema: bounded, compact. Not compiled alone: a bounded copy that cannot hold
    fails the whole grammar's compile, and the one-%json path then keeps the schema as given."""
    return {**with_bounded_numbers(schema, lambda bounded: bounded), "x-guidance": COMPACT}


class _Vocab:
    """What llguidance's TokenizerWrapper reads: each token's exact bytes (as streamed to clients),
    which tokens are special, and an encode callback."""

    def __init__(self, tokenizer, vocab_size: int):
        n = tokenizer.vocab_size
        self.tokens = [tokenizer.token_to_bytes(i) for i in range(n)] + [b""] * (vocab_size - n)
        self.special_token_ids = [i for i in range(n) if tokenizer.is_control(i)]
        self.eos_token_id = min(tokenizer.eog_ids) if tokenizer.eog_ids else tokenizer.eos_id
        self.bos_token_id = tokenizer.bos_id
        self._tokenizer = tokenizer

    def __call__(self, text: bytes) -> list[int]:
        return self._tokenizer.encode(text.decode("utf-8", "replace"), add_special_tokens=False,
                                      parse_special=False)


class GrammarCompiler:
    """Owns the llguidance view of the vocabulary (built once, on the first constrained request:
    ~a second for a 262k vocabulary) and makes matchers."""

    def __init__(self, tokenizer, vocab_size: int):
        self.tokenizer, self.vocab_size = tokenizer, vocab_size
        self._lock = threading.Lock()
        self._ll_tokenizer: llguidance.LLTokenizer | None = None

    def prepare_in_background(self) -> None:
        """Build the vocabulary view on a side thread now (a server does), so the first constrained
        request does not stall the engine step for it."""
        threading.Thread(target=lambda: self.ll_tokenizer, name="hearth-grammar", daemon=True).start()

    @property
    def ll_tokenizer(self) -> llguidance.LLTokenizer:
        with self._lock:
            if self._ll_tokenizer is None:
                wrapper = llguidance.TokenizerWrapper(_Vocab(self.tokenizer, self.vocab_size))
                eos = sorted(self.tokenizer.eog_ids) or None
                self._ll_tokenizer = llguidance.LLTokenizer(wrapper, n_vocab=self.vocab_size, eos_token=eos)
            return self._ll_tokenizer

    def matcher(self, so: StructuredOutput) -> GrammarMatcher:
        return GrammarMatcher(llguidance.LLMatcher(self.ll_tokenizer, compile_grammar(so), log_level=0),
                              self.tokenizer.token_to_bytes, frozenset(self.tokenizer.eog_ids))


class GrammarMatcher:
    TAIL = 16
    """Accepted tokens kept for ends_with: a call's name opening is a few tokens long."""

    def __init__(self, matcher: llguidance.LLMatcher, token_bytes: Callable[[int], bytes] | None = None,
                 ends: frozenset[int] = frozenset()):
        """ends: the end-of-generation ids (the llguidance tokenizer's eos_token list), which a complete
        grammar allows again and again (with ignore_eos the answer goes on after its end)."""
        self._m = matcher
        self._bytes = token_bytes
        self._ends = ends
        self._ids: list[int] = []
        """The accepted tokens (the last TAIL or more, with rollback's)."""
        self._past_stop = 0
        """End tokens accepted after llguidance stopped: it takes them but records none, so rollback
        must not hand their count to llguidance (it would undo that many real tokens)."""

    def ends_with(self, pattern: re.Pattern[bytes]) -> bool:
        """Whether the text accepted so far (its last TAIL tokens' bytes) ends with a match."""
        if self._bytes is None:
            return True  # unknown: as if it did
        return pattern.search(b"".join(map(self._bytes, self._ids[-self.TAIL:]))) is not None

    def bitmask(self) -> bytes:
        """Allowed next tokens, bit i of 32-bit word i // 32 (little-endian). Once the grammar is
        complete only end-of-generation tokens are allowed; a matcher in error allows those too."""
        return self._m.compute_bitmask()

    def accept(self, token_id: int) -> bool:
        past_stop = self._m.is_stopped() and not self._m.is_error()
        ok = self._m.consume_token(token_id)
        if ok:
            self._past_stop += past_stop
            self._ids.append(token_id)
            del self._ids[: -(self.TAIL + 128)]  # bounded, with room for a verify step's rollback
        return ok

    def valid_prefix(self, token_ids: list[int]) -> int:
        """How many of token_ids, in order, the grammar allows from here (nothing is consumed): as
        bitmask and accept have it, so end tokens after the grammar's end count too (llguidance's
        validate_tokens counts none past its stop, where its mask allows them: a verify row after
        such a draft went unmasked, and an EOS draft after the end took a row the grammar never saw)."""
        n = self._m.validate_tokens(token_ids) if token_ids else 0
        if n == len(token_ids) or token_ids[n] not in self._ends:
            return n
        valid = n
        if self._m.consume_tokens(token_ids[:n]) and self._m.is_stopped() and not self._m.is_error():
            while valid < len(token_ids) and token_ids[valid] in self._ends:
                valid += 1
        self._m.rollback(n)
        return valid

    def forced(self) -> list[int]:
        """The tokens the grammar allows as the only way on from here (llguidance's fast-forward
        tokens: `", "arguments": {` after a tool's name), [] when the next token is a choice."""
        return self._m.compute_ff_tokens()

    def rollback(self, n: int) -> None:
        """Undo the last n accepted tokens (drafts the target rejected)."""
        if n > 0:
            past_stop = min(n, self._past_stop)  # the last accepted: only end tokens follow a stop
            self._past_stop -= past_stop
            self._m.rollback(n - past_stop)
            del self._ids[-n:]

    @property
    def error(self) -> str | None:
        return self._m.get_error() if self._m.is_error() else None
