"""Two Responses request options: `truncation` and `include`.

truncation "auto" (OpenAI: "drop items from the beginning of the conversation" when the input
exceeds the context): the oldest turns are dropped until the prompt fits with room for the answer;
"disabled" (the default) leaves the input whole, and one that does not fit is a 400
context_length_exceeded, as OpenAI answers.

include "message.output_text.logprobs": each output_text part carries `logprobs` (OpenAI's schema:
token, logprob, bytes, top_logprobs of `top_logprobs` entries): those of the tokens that wrote its
text. OpenAI's other include values name outputs hearth never makes (hosted tools' results,
encrypted reasoning): taken, with nothing to add; an unknown one is a 400 naming it."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable

from hearth.api.errors import APIError
from hearth.tool_parsers import ContentDelta

LOGPROBS = "message.output_text.logprobs"
INCLUDE = (LOGPROBS, "code_interpreter_call.outputs", "computer_call_output.output.image_url",
           "file_search_call.results", "message.input_image.image_url", "reasoning.encrypted_content",
           "web_search_call.action.sources")
"""OpenAI's include values (its Responses reference); only LOGPROBS adds anything here."""


def wants_logprobs(include: list | None) -> bool:
    for i, value in enumerate(include or []):
        if value not in INCLUDE:
            raise APIError(400, f"include[{i}]: {value!r} is not one of {', '.join(map(repr, INCLUDE))}",
                           param=f"include[{i}]")
    return LOGPROBS in (include or [])


def truncate_oldest(count: Callable[[list[dict]], int], conversation: list[dict], limit: int) -> list[dict]:
    """truncation "auto": the conversation with as few of its oldest turns dropped as lets count(it)
    <= limit. Leading system messages (instructions) stay; a cut falls only before a user message, so
    that no tool result loses its call. None that fits: the shortest (the 400 then says by how much)."""
    if count(conversation) <= limit:
        return conversation
    head = next((i for i, m in enumerate(conversation) if m.get("role") not in ("system", "developer")),
                len(conversation))
    cuts = [i for i in range(head + 1, len(conversation)) if conversation[i].get("role") == "user"]
    if not cuts:
        return conversation
    # fewer turns kept, fewer tokens: the first cut that fits is found in log(turns) renders
    at = bisect_left(cuts, True, key=lambda i: count(conversation[:head] + conversation[i:]) <= limit)
    return conversation[:head] + conversation[cuts[min(at, len(cuts) - 1)]:]


class MessageLogprobs:
    """Which generated tokens' logprobs go on the output_text part: those of the updates that wrote
    its text, with the tokens held back just before them (a partial stop string or UTF-8 character);
    reasoning and tool-call tokens are none of its."""

    def __init__(self):
        self._held: list[dict] = []

    def take(self, events: list, logprobs: list[dict]) -> list[dict]:
        """This update's share of the message text's logprobs (events: its parser events)."""
        if any(isinstance(e, ContentDelta) and e.text for e in events):
            out, self._held = self._held + logprobs, []
            return out
        self._held = [] if events else self._held + logprobs
        return []
