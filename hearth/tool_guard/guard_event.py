"""What the layer did for one request, as typed records the response reports (`hearth.events`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class GuardEvent:
    kind: str
    """"rescued", "nudged", "nudges_exhausted", "compacted", "tools_ranked", ..."""
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

    def extension(self) -> dict | None:
        """The response's `hearth` field, or None when the layer did nothing."""
        return {"events": [e.to_json() for e in self.events]} if self.events else None


def attach(body: dict, log: GuardLog) -> dict:
    """Put the log into a response body as `hearth: {"events": [...]}` (the one place that decides
    the field's shape; a `hearth` field set by another part of the layer gets the events added)."""
    ext = log.extension()
    if ext is not None:
        existing = body.get("hearth")
        if isinstance(existing, dict):
            existing.setdefault("events", []).extend(ext["events"])
        else:
            body["hearth"] = ext
    return body
