"""What the layer's request-side parts did (rescue, compaction, tool ranking), as typed records the
response reports in its `hearth` field (GuardReport.events) and the counters count by kind."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class GuardEvent:
    kind: str
    """"rescued", "compacted", "tools_ranked", "prompt_instruction" (a sentence the guard added to the
    prompt: hearth.tool_guard.parallel_hint) (workflow nudges are the report's retries); in mode `off`,
    "unparsed_call": a call whose arguments are not JSON (streamed, then broken, or cut off by
    max_tokens: ToolCall.unparsed)."""
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"kind": self.kind, **self.detail}


@dataclass(slots=True)
class GuardLog:
    """The events of one request, in the order they happened."""
    events: list[GuardEvent] = field(default_factory=list)

    def add(self, kind: str, **detail: Any) -> GuardEvent:
        event = GuardEvent(kind, detail)
        self.events.append(event)
        return event
