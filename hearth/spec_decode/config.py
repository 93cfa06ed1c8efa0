"""`speculative_config`: vLLM's keys, validated into one record; a bad key or value is one line
naming the field."""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields, replace

from hearth.errors import HearthError
from hearth.json_object import json_object
from hearth.spec_decode.thresholds import POLICY

log = logging.getLogger("hearth")

DRAFT_QUANTS = ("q4_0", "q5_0", "q8_0")
"""draft_quant's types: the 32-wide ones that gguf-py encodes and every backend reads (its K-quants it
only decodes); hearth.runner.draft_quant."""
DRAFT_ONLY = ("model", "draft_vocab", "draft_quant", "draft_lookup_min")
"""Keys that apply to method "draft" only."""
METHOD_ALIASES = {"draft_model": "draft"}
"""vLLM's method names for hearth's proposers."""
DEFAULT_DRAFT_VOCAB = 65536
"""draft_vocab unset: Qwen2.5-Coder-0.5B drafting for the 1.5B drafts exactly what its whole head does
on code generation and chat with this many (32,768 loses 17% of code generation's accepted tokens
per step), and its step is ~10% cheaper (docs/speculative.md, 2026-12-05 sixth session, "the draft's head")."""
_TYPES = {"str": str, "int": int, "int | None": int, "float": (int, float), "bool": bool}


class InvalidSpeculativeConfig(HearthError, ValueError):
    """A speculative_config that names an unknown method or key, or holds a value out of range."""


def check_drafts_fit(k: int, context: int, name: str) -> None:
    """A step verifies a sequence's next token and its k drafts within its context: k must be below it
    (`name`: where k came from, a field or a command-line flag)."""
    if k >= context:
        raise InvalidSpeculativeConfig(f"{name} ({k}) must be below the context ({context} tokens): a step verifies "
                                       "the next token and its drafts within it; lower it or raise the context")


@dataclass(frozen=True, slots=True)
class SpeculativeConfig:
    method: str = "ngram"
    """Proposer: ngram (prompt lookup over the request's prompt and output), suffix (a suffix cache
    over the request's text and the requests finished before) or draft (a small model with the
    target's vocabulary, `model`; vLLM's name draft_model too) or mtp (the target's own multi-token-prediction
    head: Qwen3.5's; hearth.spec_decode.mtp). Parsed from JSON, as vLLM reads it: unset
    with a `model` is draft, unset without one an error (the default here serves code that builds the record)."""
    model: str = ""
    """The draft model of method draft: a catalog name or a .gguf path."""
    num_speculative_tokens: int | None = None
    """Most draft tokens verified per sequence and step (K); unset (None, read `k`): 4, with method
    suffix suffix_decoding_max_tree_depth (as vLLM), lowered to fit the context (fit_context). A step
    verifies only the drafts its token budget (max_num_batched_tokens) has left after every request's
    real tokens, as vLLM's scheduler trims them."""
    tree_budget: int = 0
    """Most nodes of a token tree verified per sequence and step, its depth at most
    num_speculative_tokens (0: chains only). The n-gram proposer branches where earlier
    continuations differ, the draft model grows a best-first tree from its per-position top-k."""
    draft_vocab: int | None = None
    """Method draft: the draft scores only token ids below this, the vocabulary's special tokens and
    the ids of the request's own text, and drafts from those (a reduced head, FR-Spec's idea: BPE ids
    follow merge frequency); 0: the whole vocabulary. At most the draft's vocabulary size. Unset:
    DEFAULT_DRAFT_VOCAB where the draft's vocabulary is larger, on the CPU backend; else the whole."""
    draft_quant: str = ""
    """Method draft: the draft's matrices of more bits per weight than this type (q4_0, q5_0 or q8_0)
    re-encoded at it when loaded, so a draft step reads fewer bytes (its drafts stay verified); "":
    as in the file."""
    draft_lookup_min: int = 0
    """Method draft: prompt lookup first; a request whose text ends in an n-gram of at least this many
    tokens seen earlier in it verifies the lookup's continuation and skips the draft model that step
    (0: the draft model always)."""
    prompt_lookup_min: int = 2
    """Shortest suffix n-gram the ngram proposer matches."""
    prompt_lookup_max: int = 5
    """Longest suffix n-gram the ngram proposer matches (tried first)."""
    disable_by_batch_size: int = POLICY.disable_by_batch_size
    """No drafts in a step with this many running sequences or more: the step is then compute-bound
    and verifying costs more than it saves (0 = never disable; the default is measured:
    hearth.spec_decode.thresholds)."""
    cost_aware: bool = True
    """Draft only as many tokens as a request's acceptance rate pays for at the draft cost measured
    on this machine's steps (hearth.spec_decode.cost; a seeded sampled request at the fixed prior,
    so it stays reproducible); false: always the budget, adapted to acceptance alone."""
    suffix_decoding_max_tree_depth: int = 64
    """Method suffix: the depth of its tries, which bounds the match length plus the draft length.
    vLLM's default is 24; 64 lets a repeated answer verify ~20 tokens a step instead of ~11 (modeled
    5.2-5.7x plain on the three bench_spec workloads against 3.9-4.4x, first sight unchanged:
    docs/speculative.md, 2026-12-05 "deeper suffix tries")."""
    suffix_decoding_max_cached_requests: int = 10000
    """Method suffix: finished requests kept in the global trie, evicted oldest first (0: none, only
    the request's own text is matched)."""
    suffix_decoding_max_spec_factor: float = 1.0
    """Method suffix: a draft has at most this times the match length tokens."""
    suffix_decoding_min_token_prob: float = 0.1
    """Method suffix: drafts only tokens whose estimated probability (the product of count ratios
    along the path) is at least this."""

    @classmethod
    def parse(cls, value: dict | str | None) -> SpeculativeConfig | None:
        """From a dict or its JSON text (as `--speculative-config` takes it); None stays None."""
        if value is None or isinstance(value, SpeculativeConfig):
            return value
        value = given_keys(value)
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(value) - set(known))
        if unknown:
            raise InvalidSpeculativeConfig(f"speculative_config: unknown key {unknown[0]!r} "
                                           f"(known: {', '.join(known)})")
        for key, v in value.items():
            if v is None and known[key].type.endswith("| None"):
                continue  # null: unset, as asdict writes such a field (the default then)
            want = _TYPES[known[key].type]
            if not isinstance(v, want) or (isinstance(v, bool) and want is not bool):
                name = "number" if want == (int, float) else want.__name__
                raise InvalidSpeculativeConfig(f"speculative_config.{key} must be {name}, not {v!r}")
        method = _method(value)
        return cls(**value, method=method)

    @property
    def k(self) -> int:
        """K: num_speculative_tokens, or its default where unset."""
        if self.num_speculative_tokens is not None:
            return self.num_speculative_tokens
        return self.suffix_decoding_max_tree_depth if self.method == "suffix" else 4

    @property
    def summary(self) -> str:
        """What runs, in a line: the method, K (and the tree budget), the draft model."""
        tree = f", tree_budget {self.tree_budget}" if self.tree_budget else ""
        draft = f", draft model {self.model}" if self.method == "draft" else ""
        return f"{self.method} (num_speculative_tokens {self.k}{tree}{draft})"

    def lookup(self, n: int) -> SpeculativeConfig:
        """The prompt lookup a draft runs first (draft_lookup_min n): ngram chains of >= n-grams."""
        default = {f.name: f.default for f in fields(self) if f.name in DRAFT_ONLY}
        return replace(self, method="ngram", tree_budget=0, prompt_lookup_min=n,
                       prompt_lookup_max=max(n, self.prompt_lookup_max), **default)

    @property
    def max_drafts(self) -> int:
        """Most drafts per sequence and step: tree nodes, or a chain's tokens."""
        return self.tree_budget or self.k

    def draft_vocab_for(self, vocab_size: int, default: int = DEFAULT_DRAFT_VOCAB) -> int:
        """The reduced head's first ids for a draft of vocab_size ids (0: the whole head); default:
        for draft_vocab unset (0 where no reduced head was measured to pay)."""
        if self.draft_vocab is None:
            return default if default < vocab_size else 0
        return 0 if self.draft_vocab == vocab_size else self.draft_vocab

    def check_draft_vocab(self, vocab_size: int) -> None:
        """draft_vocab names ids of the draft's head: at most its rows."""
        if self.draft_vocab is not None and self.draft_vocab > vocab_size:
            raise InvalidSpeculativeConfig(f"speculative_config.draft_vocab ({self.draft_vocab}) must be at most the "
                                           f"draft model's vocabulary size ({vocab_size})")

    def check_step_budget(self, max_num_batched_tokens: int) -> None:
        """A step verifies a sequence's next token and its drafts together: they must fit in one."""
        if self.tree_budget >= max_num_batched_tokens:
            raise InvalidSpeculativeConfig(
                f"speculative_config.tree_budget ({self.tree_budget}) must be below max_num_batched_tokens "
                f"({max_num_batched_tokens}): a step verifies the next token and the tree's nodes together")

    def check_context(self, max_model_len: int) -> None:
        """A K given must be below the context; a default one is lowered to fit it (fit_context)."""
        if self.num_speculative_tokens is not None:
            check_drafts_fit(self.num_speculative_tokens, max_model_len, "speculative_config.num_speculative_tokens")

    def fit_context(self, max_model_len: int) -> SpeculativeConfig:
        """This config with K set: the one given (checked against the context), else the default, at
        most max_model_len - 1 (suffix's 64 at --ctx 64: a step verifies the next token and K drafts)."""
        self.check_context(max_model_len)
        if self.num_speculative_tokens is not None:
            return self
        k = max(1, min(self.k, max_model_len - 1))
        if k < self.k:
            log.info(f"speculative decoding drafts up to {k} tokens a step, not method {self.method}'s "
                     f"default {self.k}: a step verifies them and the next token within the {max_model_len}-token "
                     "context")
        return replace(self, num_speculative_tokens=k)

    def __post_init__(self) -> None:
        from hearth.spec_decode.proposer import PROPOSERS

        if self.method not in PROPOSERS:
            raise InvalidSpeculativeConfig(f"speculative_config.method {self.method!r} is unknown "
                                           f"(known: {', '.join(sorted(PROPOSERS))})")
        checks = [  # the tree depth first: suffix's K defaults to it, and a depth of 0 was named as K
            ("suffix_decoding_max_tree_depth", self.suffix_decoding_max_tree_depth >= 2,
             "at least 2 (a match of 1 token and a draft of 1)"),
            ("num_speculative_tokens", self.k >= 1, "at least 1"),
            ("tree_budget", self.tree_budget >= 0, "0 (chains only) or more"),
            ("draft_vocab", self.draft_vocab is None or self.draft_vocab >= 0, "0 (the whole vocabulary) or more"),
            ("draft_quant", self.draft_quant in ("", *DRAFT_QUANTS), f"one of {', '.join(DRAFT_QUANTS)} or \"\""),
            ("draft_lookup_min", self.draft_lookup_min >= 0, "0 (off) or more"),
            ("prompt_lookup_min", self.prompt_lookup_min >= 1, "at least 1"),
            ("prompt_lookup_max", self.prompt_lookup_max >= self.prompt_lookup_min,
             f"at least prompt_lookup_min ({self.prompt_lookup_min})"),
            ("disable_by_batch_size", self.disable_by_batch_size >= 0, "0 or more"),
            ("suffix_decoding_max_cached_requests", self.suffix_decoding_max_cached_requests >= 0, "0 or more"),
            ("suffix_decoding_max_spec_factor", self.suffix_decoding_max_spec_factor > 0, "above 0"),
            ("suffix_decoding_min_token_prob", 0 <= self.suffix_decoding_min_token_prob <= 1, "between 0 and 1"),
        ]
        if self.method == "draft" and not self.model:
            raise InvalidSpeculativeConfig('speculative_config.model is required with method "draft" '
                                           '(a catalog name or a .gguf path)')
        for key in DRAFT_ONLY:
            if getattr(self, key) and self.method != "draft":
                raise InvalidSpeculativeConfig(f'speculative_config.{key} applies to method "draft" only, '
                                               f'not {self.method!r}')
        for name, ok, want in checks:
            if not ok:
                raise InvalidSpeculativeConfig(f"speculative_config.{name} must be {want}, "
                                               f"got {getattr(self, name)!r}")


def given_keys(value: dict | str) -> dict:
    """The keys a config gives, as a dict, from a dict or its JSON text (a null method is not given):
    what `hearth serve` compares its other speculation flags with."""
    try:
        value = json_object(value)
    except ValueError as e:
        raise InvalidSpeculativeConfig(f"speculative_config {e}") from None
    return {k: v for k, v in value.items() if not (k == "method" and v is None)}


def _method(value: dict) -> str:
    """The proposer a config names, as vLLM reads it: a `model` with no method is a draft model; neither
    is an error (vLLM: "num_speculative_tokens was provided but without speculative model"), never a
    silent ngram."""
    method = value.pop("method", None)
    if method is None:
        if not value.get("model"):
            raise InvalidSpeculativeConfig('speculative_config needs "method" (ngram, suffix or draft) or "model" '
                                           '(a draft model: method draft)')
        return "draft"
    return METHOD_ALIASES.get(method, method)
