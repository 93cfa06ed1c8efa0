"""The choices of a chat completion as parsed updates: (choice index, Update) with the channel
events of new output, its token ids and logprobs, and the finish. `PlainChoices` parses one
Generation's text as it comes (the server without the tool guard); hearth.api.guarded yields the
same updates for attempts that the guard checks and retries."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from hearth.api.generate import Generation
from hearth.tool_parsers import Event


@dataclass(slots=True)
class Update:
    events: list[Event]
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[dict[int, float]] | None = None
    finished: bool = False
    finish_reason: str | None = None
    stop_reason: int | str | None = None


class PlainChoices:
    def __init__(self, gen: Generation, parsers: list):
        self.gen, self.parsers = gen, parsers
        self.request_id = gen.request_id

    @property
    def n(self) -> int:
        return self.gen.n

    @property
    def num_prompt_tokens(self) -> int:
        return self.gen.num_prompt_tokens

    @property
    def num_cached_tokens(self) -> int:
        return self.gen.num_cached_tokens

    def report(self, i: int) -> dict | None:
        return None

    def abort(self) -> None:
        self.gen.abort()

    async def updates(self) -> AsyncIterator[tuple[int, Update]]:
        async for i, out in self.gen.outputs():
            parser = self.parsers[i]
            events = parser.feed(out.new_text) + (parser.finish() if out.finished else [])
            yield i, Update(events, out.new_token_ids, out.new_logprobs, out.finished, out.finish_reason,
                            out.stop_reason)
