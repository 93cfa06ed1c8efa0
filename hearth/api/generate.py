"""One API request in the engine: n child requests (child j seeded seed + j, as LLM.generate does),
their outputs merged into one stream of (index, EngineOutput), or collected whole. Prompt logprobs
are asked of each prompt's first child only: a child that scores its prompt takes no prefix-cache
hit, so n of them computed the prompt n times; its siblings hit its blocks and are handed its result.
A request for the prompt alone (prompt_only) computes one token, which its outputs drop; Generation
sets that max_tokens itself.

Every path out (done, client gone, error) aborts what is still running, which frees its KV blocks."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace

from hearth.api.errors import APIError
from hearth.api.media_prompt import prompt_media
from hearth.errors import HearthError
from hearth.outputs import EngineOutput
from hearth.sampling_params import SamplingParams


@dataclass(slots=True)
class Choice:
    """One child's whole output."""
    index: int
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[dict[int, float]] = field(default_factory=list)
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    prompt_logprobs: list[dict[int, float] | None] | None = None
    """Only for SamplingParams.prompt_logprobs (EngineOutput's)."""
    prompt_ranks: list[int | None] | None = None
    """With prompt_logprobs: the prompt tokens' ranks (EngineOutput's)."""
    embedding: list[float] | None = None
    """Only for SamplingParams.pooling (EngineOutput's)."""


PROMPT_ONLY_TOKENS = 1
"""The engine's max_tokens for a request for the prompt alone (llama-server's n_predict 0; /v1/completions'
echo with max_tokens 0, prompt scoring): it has no zero-token request, so it computes one token, which
Generation(prompt_only=True) drops. The prompt must leave room for it (a route fitting a prompt to the
context counts it)."""


class Generation:
    """`prompts` is one prompt's ids or a batch of them; choice index = prompt index * n + j."""

    def __init__(self, engine, prompts: list[int] | list[list[int]], params: SamplingParams, metrics=None,
                 request_id: str | None = None, prompt_only: bool = False, pair_starts: list[int | None] | None = None):
        """prompt_only: the prompt alone: the engine computes PROMPT_ONLY_TOKENS whatever params' max_tokens
        (give None: make_params then checks the room a token needs), and every output comes without them,
        ending as a limit. pair_starts: per prompt, its SamplingParams.pair_start (a reranker's pairs)."""
        self.prompt_only = prompt_only
        if prompt_only:
            params = replace(params, max_tokens=PROMPT_ONLY_TOKENS)
        batch = prompts if prompts and isinstance(prompts[0], list) else [prompts]
        self.request_id = request_id or uuid.uuid4().hex
        self.num_prompt_tokens = sum(len(ids) for ids in batch)
        self.n_per_prompt = params.n
        self._cached: dict[int, int] = {}
        self._drafts: dict[int, tuple[int, int]] = {}  # child -> (drafts verified, accepted) so far
        self._share = params.prompt_logprobs is not None and params.n > 1
        self._prompt_logprobs: dict[int, tuple[list, list]] = {}
        """First child's index -> its prompt's logprobs and ranks, once they came."""
        self._held: dict[int, list[EngineOutput]] = {}
        """A sibling's outputs that came before its prompt's logprobs did (its first carries them)."""
        self._given: set[int] = set()
        """Siblings handed their prompt's logprobs."""
        self.streams = []
        self.timers = []
        check_fits(engine, len(batch), params.n)
        try:  # validate and queue all, or none
            for p, ids in enumerate(batch):
                for j in range(params.n):
                    child = replace(params, n=1, seed=None if params.seed is None else params.seed + j,
                                    prompt_logprobs=params.prompt_logprobs if j == 0 else None,
                                    pair_start=params.pair_start if pair_starts is None else pair_starts[p])
                    rid = f"{self.request_id}-{p * params.n + j}"
                    self.streams.append(engine.add_request(ids, child, request_id=rid, media=prompt_media(ids)))
                    self.timers.append(metrics.timer() if metrics else None)
        except BaseException:
            self.abort()
            raise

    @property
    def n(self) -> int:
        return len(self.streams)

    @property
    def num_cached_tokens(self) -> int:
        """Prompt tokens served from the prefix cache, counted once per prompt (its first child)."""
        return sum(self._cached.get(i, 0) for i in range(0, self.n, self.n_per_prompt))

    @property
    def drafts(self) -> tuple[int, int]:
        """(draft tokens verified, accepted) over every child so far: llama-server's draft_n, draft_n_accepted."""
        return sum(d[0] for d in self._drafts.values()), sum(d[1] for d in self._drafts.values())

    def abort(self) -> None:
        for s in self.streams:
            s.abort()

    async def outputs(self) -> AsyncIterator[tuple[int, EngineOutput]]:
        """Deltas of all children as they come; raises the engine's error if a step fails."""
        try:
            async for i, out in interleave(self.streams):
                for k, shared in self._shared(i, out) if self._share else ((i, out),):
                    seen = self._seen(k, shared)  # the metrics count the token computed
                    yield k, _without_tokens(seen) if self.prompt_only else seen
        finally:
            self.abort()

    async def collect(self) -> list[Choice]:
        choices = [Choice(i) for i in range(self.n)]
        async for i, out in self.outputs():
            c = choices[i]
            c.text += out.new_text
            c.token_ids += out.new_token_ids
            c.logprobs += out.new_logprobs or []
            if out.prompt_logprobs is not None:
                c.prompt_logprobs, c.prompt_ranks = out.prompt_logprobs, out.prompt_ranks
            if out.embedding is not None:
                c.embedding = out.embedding
            if out.finished:
                c.finish_reason, c.stop_reason = out.finish_reason, out.stop_reason
        return choices

    def _shared(self, i: int, out: EngineOutput) -> list[tuple[int, EngineOutput]]:
        """(index, output) to pass on for child i's `out`: a sibling's wait for the first child's prompt
        logprobs (their steps may come first: the streams interleave), its first output carrying them."""
        first = i - i % self.n_per_prompt
        if i == first:
            if out.prompt_logprobs is None:
                return [(i, out)]
            self._prompt_logprobs[first] = out.prompt_logprobs, out.prompt_ranks
            return [(i, out)] + [(k, o) for k in range(first + 1, first + self.n_per_prompt)
                                 for o in self._with_prompt(k, self._held.pop(k, []))]
        if first not in self._prompt_logprobs:
            self._held.setdefault(i, []).append(out)
            return []
        return [(i, o) for o in self._with_prompt(i, [out])]

    def _with_prompt(self, i: int, outs: list[EngineOutput]) -> list[EngineOutput]:
        if outs and i not in self._given:  # child i's first output: the prompt's logprobs go with it
            self._given.add(i)
            entries, ranks = self._prompt_logprobs[i - i % self.n_per_prompt]
            outs[0] = replace(outs[0], prompt_logprobs=entries, prompt_ranks=ranks)
        return outs

    def _seen(self, i: int, out: EngineOutput) -> EngineOutput:
        if self.timers[i] is not None:
            self.timers[i].on_output(out)
        self._cached.setdefault(i, out.num_cached_tokens)
        self._drafts[i] = out.drafts
        return out


def _without_tokens(out: EngineOutput) -> EngineOutput:
    """A prompt-only request's output: the token computed dropped, the end a limit (as llama-server's
    n_predict 0 and vLLM's echo with max_tokens 0 report it)."""
    return replace(out, new_token_ids=[], new_text="", new_logprobs=None if out.new_logprobs is None else [],
                   new_raw_logprobs=None if out.new_raw_logprobs is None else [],
                   finish_reason="length" if out.finished else None, stop_reason=None)


def check_fits(engine, prompts: int, n: int) -> None:
    """A request of more children than the engine ever holds at once is a 400: a 429 ("retry later")
    would fail on every retry."""
    limit = getattr(engine, "max_in_flight", None)
    if limit is not None and prompts * n > limit:
        field = "n" if prompts == 1 else "prompt"
        raise APIError(400, f"{field}: {prompts} prompt(s) x n={n} is {prompts * n} requests, more than this "
                            f"server holds at once ({limit}: --max-num-seqs + --max-queued)", param=field)


async def interleave(streams: list) -> AsyncIterator[tuple[int, object]]:
    """(index, item) from several async iterables as each yields; one is iterated in place. An engine
    error (HearthError) in any is raised here; the others are cancelled when this ends."""
    if len(streams) == 1:
        async for item in streams[0]:
            yield 0, item
        return
    queue: asyncio.Queue = asyncio.Queue()
    tasks = [asyncio.create_task(_pump(i, s, queue)) for i, s in enumerate(streams)]
    try:
        remaining = len(streams)
        while remaining:
            i, item = await queue.get()
            if item is None:
                remaining -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield i, item
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _pump(i: int, stream, queue: asyncio.Queue) -> None:
    try:
        async for out in stream:
            queue.put_nowait((i, out))
    except HearthError as e:
        queue.put_nowait((i, e))
    finally:
        queue.put_nowait((i, None))


async def until_disconnect(request, coro):
    """Run `coro`; if the client goes away first, cancel it (aborting its requests) and return None."""
    work = asyncio.ensure_future(coro)
    watch = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        if not work.done():  # client gone, or this task cancelled (server shutting down)
            work.cancel()
            await asyncio.gather(work, return_exceptions=True)
    return None if work.cancelled() else work.result()


async def _disconnected(request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
