"""The choices of a chat completion as parsed updates: (choice index, Update) with the channel
events of new output, its token ids and logprobs, and the finish. `PlainChoices` parses one
Generation's text as it comes (the server without the tool guard); hearth.api.guarded yields the
same updates for attempts that the guard checks and retries."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from hearth.api.generate import Generation
from hearth.tool_guard.guard_event import GuardEvent
from hearth.tool_parsers import ContentDelta, Event, ToolCallEvent


@dataclass(slots=True)
class Update:
    events: list[Event]
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[dict[int, float]] | None = None
    finished: bool = False
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    content: str | None = None
    """On a finish: the choice's text as a whole answer reads, in place of the content the updates
    streamed (a re-prompted attempt's text superseded, a rescued call's text taken out); None: as
    streamed. A stream cannot take back what it sent: only whole answers use it (settle)."""
    prompt_logprobs: list[dict[int, float] | None] | None = None
    """Only for SamplingParams.prompt_logprobs, on the first update of the attempt that scored the
    request's prompt (EngineOutput's)."""
    prompt_ranks: list[int | None] | None = None
    """With prompt_logprobs (EngineOutput's)."""


def settle(events: list[Event], u: Update) -> list[Event]:
    """A whole answer's events so far, with update `u` added (its `content` replacing the text)."""
    if u.content is None:
        return events + u.events
    return [e for e in events if not isinstance(e, ContentDelta)] + [ContentDelta(u.content)] + u.events


class PlainChoices:
    def __init__(self, gen: Generation, parsers: list, events: list | None = None):
        """`events`: what the request-side parts did (GuardEvents: tools ranked, compacted)."""
        self.gen, self.parsers, self.events = gen, parsers, events or []
        self.request_id = gen.request_id
        self._unparsed: list[list[GuardEvent]] = [[] for _ in parsers]
        """Per choice: its calls whose arguments are not JSON (streamed then broken, or cut: ToolCall.unparsed)."""

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
        """The `hearth` field: only the request-side parts' events (no guard ran), and choice i's
        `unparsed_call`s: no call whose arguments are not JSON goes out as if it were clean."""
        events = self.events + self._unparsed[i]
        return {"events": [e.to_json() for e in events]} if events else None

    def abort(self) -> None:
        self.gen.abort()

    async def updates(self) -> AsyncIterator[tuple[int, Update]]:
        async for i, out in self.gen.outputs():
            parser = self.parsers[i]
            events = parser.feed(out.new_text) + (parser.finish(out.finish_reason == "length") if out.finished else [])
            self._unparsed[i] += [GuardEvent("unparsed_call", {"id": e.call.id, "name": e.call.name, "error": e.call.unparsed})
                                  for e in events if isinstance(e, ToolCallEvent) and e.call.unparsed]
            yield i, Update(events, out.new_token_ids, out.new_logprobs, out.finished, out.finish_reason,
                            out.stop_reason, prompt_logprobs=out.prompt_logprobs, prompt_ranks=out.prompt_ranks)
