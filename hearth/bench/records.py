"""What one request did, timed where the client saw it: the plain record every client fills and
every metric reads. Times are time.perf_counter() seconds."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class RequestResult:
    index: int
    """The prompt's number in the workload."""
    concurrency: int
    prompt_sha: str
    start: float
    end: float = 0.0
    chunk_times: list[float] = field(default_factory=list)
    """Arrival of each chunk that carried output (a token, or text when the server sends no ids)."""
    chunk_tokens: list[int] = field(default_factory=list)
    """Tokens in each chunk (1 per chunk when the server does not say)."""
    text: str = ""
    token_ids: list[int] | None = None
    """Output token ids when the client sees them (in-process); None over HTTP."""
    prompt_tokens: int | None = None
    usage_output_tokens: int | None = None
    """completion_tokens from the server's usage report, when it sends one."""
    finish_reason: str | None = None
    error: str | None = None

    def add_chunk(self, when: float, text: str, token_ids: list[int] | None = None, tokens: int = 1) -> None:
        self.chunk_times.append(when)
        self.chunk_tokens.append(len(token_ids) if token_ids is not None else tokens)
        self.text += text
        if token_ids is not None:
            self.token_ids = (self.token_ids or []) + list(token_ids)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def output_tokens(self) -> int:
        return self.usage_output_tokens if self.usage_output_tokens is not None else sum(self.chunk_tokens)

    @property
    def ttft(self) -> float | None:
        return self.chunk_times[0] - self.start if self.chunk_times else None

    @property
    def itls(self) -> list[float]:
        """Gaps between consecutive output chunks (vLLM's benchmark_serving counts ITL per chunk)."""
        t = self.chunk_times
        return [b - a for a, b in zip(t, t[1:])]

    @property
    def decode_tok_s(self) -> float | None:
        """Tokens after the first over the time after the first: the speed a reader sees."""
        n, t = self.output_tokens, self.chunk_times
        if n < 2 or len(t) < 2 or t[-1] <= t[0]:
            return None
        return (n - 1) / (t[-1] - t[0])

    @property
    def latency(self) -> float:
        return self.end - self.start


@dataclass(slots=True)
class LevelRun:
    """Every request of one concurrency level, and the wall time the level took."""

    concurrency: int
    results: list[RequestResult]
    start: float
    end: float
    peak_rss: int | None = None
    """Peak resident bytes of the measured process during the level (hearth.bench.rss), when known."""
    spec: dict | None = None
    """How much the spec-decode counters grew during the level (drafts, draft_tokens,
    accepted_tokens), when the client reads them; None without speculative decoding."""

    @property
    def duration(self) -> float:
        return self.end - self.start
