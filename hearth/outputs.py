"""What generation returns to callers (vLLM's RequestOutput / CompletionOutput shape)."""

from __future__ import annotations

from dataclasses import dataclass, field


class Logprob(float):
    """vLLM's Logprob (vllm.logprobs): `.logprob`, `.rank` (1: the most likely), `.decoded_token` (the token's
    text). A float too, its logprob: code that read hearth's {token id: logprob} floats reads it the same."""

    __slots__ = ("rank", "decoded_token")

    def __new__(cls, logprob: float, rank: int | None = None, decoded_token: str | None = None):
        self = super().__new__(cls, logprob)
        self.rank, self.decoded_token = rank, decoded_token
        return self

    @property
    def logprob(self) -> float:
        return float(self)

    def __repr__(self) -> str:
        return f"Logprob(logprob={float(self)!r}, rank={self.rank!r}, decoded_token={self.decoded_token!r})"

    def __reduce__(self):
        return Logprob, (float(self), self.rank, self.decoded_token)


@dataclass(slots=True)
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None = None
    """"stop", "length", "abort" or None while running."""
    stop_reason: int | str | None = None
    """The stop string or token id that ended it, if any."""
    logprobs: list[dict[int, Logprob]] | None = None
    """Only for SamplingParams.logprobs: per generated token {its id: Logprob, then the top alternatives'}."""
    cumulative_logprob: float | None = None
    """Only for SamplingParams.logprobs (vLLM's rule): the sum of the generated tokens' logprobs."""
    message: dict | None = None
    """LLM.chat's outputs only: the answer as an OpenAI assistant message (`content`, the
    `tool_calls` of offered tools parsed as the server parses them, `reasoning_content` where the
    template has a reasoning channel), ready to append to the conversation for the next turn."""


@dataclass(slots=True)
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool = False
    num_cached_tokens: int = 0
    metrics: dict = field(default_factory=dict)
    prompt_logprobs: list[dict[int, Logprob] | None] | None = None
    """Only for SamplingParams.prompt_logprobs: per prompt token {its id: Logprob, then the top
    alternatives'}, None for the first (nothing precedes it)."""
    prompt_ranks: list[int | None] | None = None
    """Beside prompt_logprobs: per prompt token its rank in the vocabulary (1: the model's most
    likely; 1 + the tokens strictly more likely), None for the first."""
    embedding: list[float] | None = None
    """Only for SamplingParams.pooling: the prompt's embedding (EngineOutput's)."""


@dataclass(frozen=True, slots=True)
class EmbeddingOutput:
    embedding: list[float]
    """L2-normalized."""

    @property
    def hidden_size(self) -> int:
        return len(self.embedding)


@dataclass(frozen=True, slots=True)
class EmbeddingRequestOutput:
    """LLM.embed's per prompt (vLLM's shape: `.outputs.embedding`)."""

    request_id: str
    prompt_token_ids: list[int]
    outputs: EmbeddingOutput
    finished: bool = True


@dataclass(frozen=True, slots=True)
class ScoringOutput:
    score: float
    """A reranker's relevance of the pair: sigmoid of its logit (use_activation False: the logit)."""


@dataclass(frozen=True, slots=True)
class ScoringRequestOutput:
    """LLM.score's per pair (vLLM's shape: `.outputs.score`)."""

    request_id: str
    prompt_token_ids: list[int]
    outputs: ScoringOutput
    finished: bool = True


@dataclass(slots=True)
class EngineOutput:
    """One step's news for one request: the delta since the previous EngineOutput."""

    request_id: str
    new_token_ids: list[int]
    new_text: str
    finished: bool = False
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    new_logprobs: list[dict[int, float]] | None = None
    """Per new token: {token_id: logprob} with the sampled token first, then the top alternatives."""
    new_ranks: list[int | None] | None = None
    """With new_logprobs: per new token its rank in the vocabulary (SampledToken.rank)."""
    new_raw_logprobs: list[float] | None = None
    """Only for SamplingParams.raw_logprobs: per new token its logprob before a grammar's mask."""
    num_prompt_tokens: int = 0
    num_cached_tokens: int = 0
    drafts: tuple[int, int] = (0, 0)
    """(draft tokens verified, accepted) for this request so far (speculative decoding)."""
    prompt_logprobs: list[dict[int, float] | None] | None = None
    """Only for SamplingParams.prompt_logprobs, on a request's first output: as RequestOutput's."""
    prompt_ranks: list[int | None] | None = None
    """With prompt_logprobs: as RequestOutput's."""
    embedding: list[float] | None = None
    """Only for SamplingParams.pooling, on a request's last output: its prompt's embedding."""
    error: Exception | None = None
    """Set on a request's last output where it ended in error rather than an answer (its grammar engine
    gave up mid-answer: hearth.sample.grammar.GrammarStopped); the caller raises it."""
