"""A request's token state as the scheduler sees it: plain Python, no tensors."""

from __future__ import annotations

import enum
import time
from collections.abc import Sequence

from hearth.media.inputs import MediaInput
from hearth.sampling_params import SamplingParams


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED_STOPPED = "stop"
    FINISHED_LENGTH = "length"
    FINISHED_ABORTED = "abort"

    @property
    def finished(self) -> bool:
        return self.value in ("stop", "length", "abort")


class Request:
    def __init__(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
                 eos_ids: frozenset[int], max_len: int, media: Sequence[MediaInput] = ()):
        self.request_id = request_id
        self.prompt_token_ids = list(prompt_token_ids)
        self.media = tuple(media)
        """Image rows in the prompt (sorted, disjoint: EngineCore.check_media): the runner writes their
        embeddings over the placeholder ids' at those positions."""
        self.media_announced: set[bytes] = set()
        """Digests of its images handed to the runner to encode ahead (SchedulerOutput.media_ahead)."""
        self.media_ready: set[bytes] = set()
        """Digests of its images the runner has encoded (RunnerOutput.media_ready): only their rows may be scheduled."""
        self.params = params
        self.output_token_ids: list[int] = []
        self.num_computed_tokens = 0
        """Tokens whose K/V are in the cache. One rule covers prefill chunks, decodes and recompute."""
        self.block_ids: list[int] = []
        self.block_hashes: list[bytes] = []
        """Chained prefix-cache hashes of the full blocks so far (tokens never change once full)."""
        self.num_registered_blocks = 0
        """Leading blocks of block_ids already findable in the prefix cache."""
        self.state_slot = -1
        """Its recurrent layers' state slot while it holds blocks (a model with such layers: qwen35), else -1."""
        self.state_restore = -1
        """The snapshot slot its next step restores into state_slot (admitted with a prefix-cache hit), else -1."""
        self.decode_snapshot: bytes | None = None
        """Hash of the last snapshot taken on a full block of its answer (a newer one replaces it)."""
        self.disk_payloads: list[tuple[bytes, bytes]] = []
        """(hash, payload) read from the disk tier while waiting for admission; dropped at admission."""
        self.status = RequestStatus.WAITING
        self.stop_reason: int | str | None = None
        self.eos_ids = eos_ids
        self.max_len = max_len
        """Longest total length (prompt + output) this request may reach."""
        self.arrival_time = time.monotonic()
        self.first_token_time: float | None = None
        self.num_cached_tokens = 0
        """Prompt tokens whose K/V came from the prefix cache when first scheduled."""
        self.spec_token_ids: list[int] = []
        """Draft tokens proposed to follow the output so far, verified in the next step: a chain, or
        a tree's nodes with spec_parents."""
        self.spec_parents: list[int] = []
        """[] for a chain, else the tree's parent of each draft (hearth.spec_decode.tree.DraftTree)."""
        self.num_draft_slots = 0
        """Or: how many drafts the runner's draft model may write for the next step (method draft)."""
        self.drafts = (0, 0)
        """(drafts verified, accepted) so far: llama-server's draft_n, draft_n_accepted."""
        self.prompt_logprobs: list[dict[int, float]] = []
        """Only for params.prompt_logprobs: those of prompt tokens 1, 2, ... so far (RunnerOutput's)."""
        self.prompt_ranks: list[int] = []
        """Beside prompt_logprobs: each of those tokens' rank in the vocabulary (1: the most likely)."""
        self.pooled: list[float] = []
        """Only for params.pooling: the sum of the rows its embedding read so far (RunnerOutput's)."""

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    @property
    def needs_prompt_logprobs(self) -> bool:
        """Asked for prompt logprobs and has not all of them: every prompt position is to be computed."""
        return self.params.prompt_logprobs is not None and len(self.prompt_logprobs) < len(self.prompt_token_ids) - 1

    def add_prompt_logprobs(self, start: int, entries: list[dict[int, float]], ranks: list[int]) -> None:
        """A chunk's, for prompt tokens start + 1, ...: those already held (a recompute after a
        preemption) are kept."""
        held = len(self.prompt_logprobs) - start
        self.prompt_logprobs += entries[held:]
        self.prompt_ranks += ranks[held:]

    @property
    def pools_every_row(self) -> bool:
        """Its embedding reads every prompt row: none may come from the prefix cache."""
        return self.params.pooling == "mean"

    def add_pooled(self, start: int, chunk_sum: list[float]) -> None:
        """A chunk's sum; one from position 0 starts over (a recompute after a preemption)."""
        self.pooled = chunk_sum if start == 0 or not self.pooled else [a + b for a, b in zip(self.pooled, chunk_sum)]

    def embedding(self) -> list[float]:
        """The pooled rows, their mean for "mean", L2-normalized; a reranker's ("rank") [logit] as it is."""
        v = self.pooled
        if self.params.pooling == "rank":  # a score, not a direction
            return list(v)
        if self.params.pooling == "mean":
            v = [x / len(self.prompt_token_ids) for x in v]
        norm = sum(x * x for x in v) ** 0.5 or 1.0
        return [x / norm for x in v]

    def token_slice(self, start: int, n: int) -> list[int]:
        """all_token_ids[start:start + n] without joining prompt and output (a decode reads 1 token)."""
        n_prompt = len(self.prompt_token_ids)
        if start >= n_prompt:
            return self.output_token_ids[start - n_prompt : start - n_prompt + n]
        head = self.prompt_token_ids[start : start + n]
        return head + self.output_token_ids[: n - len(head)]

    def append_token(self, token_id: int) -> None:
        """Record a sampled token and decide whether the request is done."""
        if self.first_token_time is None:
            self.first_token_time = time.monotonic()
        self.output_token_ids.append(token_id)
        p, n_out = self.params, len(self.output_token_ids)
        # before min_tokens the runner never samples these (Scheduler._banned)
        if token_id in p.stop_token_ids:
            self.finish(RequestStatus.FINISHED_STOPPED, token_id)
            return
        if not p.ignore_eos and token_id in self.eos_ids:
            self.finish(RequestStatus.FINISHED_STOPPED, None)
            return
        if (p.max_tokens is not None and n_out >= p.max_tokens) or self.num_tokens >= self.max_len:
            self.finish(RequestStatus.FINISHED_LENGTH)

    def finish(self, status: RequestStatus, reason: int | str | None = None) -> None:
        self.status = status
        self.stop_reason = reason
