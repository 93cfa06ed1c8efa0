"""Stored responses (`store`, `previous_response_id`, GET/DELETE /v1/responses/{id}, its
input_items), bounded in number and age: the oldest goes first when the store is full, and an
expired one is gone (a background response still running stays). Images' bytes have a budget of their own: the oldest go first.

A record keeps what a follow-up needs to continue through the prefix cache: the conversation as
chat messages (input and output, without `instructions`, which OpenAI does not carry over), and
the previous prompt's text and token ids with the output's ids after them."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class StoredResponse:
    body: dict
    """The response object, as GET returns it."""
    messages: list[dict]
    """The conversation so far, this response's output included, as chat messages."""
    text: str | None
    """Previous prompt text + the output as generated (special tokens kept); None when the tool
    guard retried (the output is not one continuation of the prompt)."""
    token_ids: list[int]
    """Previous prompt ids + output ids: the KV the prefix cache holds for `text`."""
    created: float = field(default=0.0)
    input_items: list[dict] = field(default_factory=list)
    """What GET /v1/responses/{id}/input_items lists, oldest first: as OpenAI, the whole context this
    response answered (a previous response's input items and output, then this request's input)."""
    images: Any = None
    """The images `messages` hold markers of (hearth.api.media_parts.RequestImages; None: none), which a
    follow-up continues."""
    run: Any = None
    """A background response's run (hearth.api.responses_background.Run): its live status and stream events."""


MAX_IMAGE_BYTES = 256 * 2**20
"""Image bytes the store keeps for follow-ups, all records together (1000 records of 20 MB would be 20 GB)."""


class ResponseStore:
    def __init__(self, max_count: int = 1000, max_age_s: float = 3600.0,
                 clock: Callable[[], float] = time.monotonic, max_image_bytes: int = MAX_IMAGE_BYTES):
        self.max_count, self.max_age_s, self.clock = max_count, max_age_s, clock
        self.max_image_bytes = max_image_bytes
        self._items: OrderedDict[str, StoredResponse] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, response_id: str, record: StoredResponse) -> None:
        with self._lock:
            record.created = self.clock()
            self._items[response_id] = record
            self._items.move_to_end(response_id)
            self._expire()
            over = len(self._items) - self.max_count
            for rid in [rid for rid, r in self._items.items() if not _running(r)][:max(over, 0)]:
                del self._items[rid]
            self._trim_images()

    def get(self, response_id: str) -> StoredResponse | None:
        with self._lock:
            self._expire()
            return self._items.get(response_id)

    def delete(self, response_id: str) -> bool:
        with self._lock:
            self._expire()
            return self._items.pop(response_id, None) is not None

    def __len__(self) -> int:
        with self._lock:
            self._expire()
            return len(self._items)

    def _trim_images(self) -> None:
        """The oldest records' image bytes go first once all of them pass max_image_bytes."""
        held = [r.images for r in self._items.values() if r.images]
        total = sum(images.nbytes() for images in held)
        for images in held:
            if total <= self.max_image_bytes:
                return
            total -= images.nbytes()
            images.drop_bytes()

    def _expire(self) -> None:
        oldest = self.clock() - self.max_age_s
        expired = []
        for rid, r in self._items.items():  # oldest first: the scan ends at the first one still young
            if r.created >= oldest:
                break
            if not _running(r):
                expired.append(rid)
        for rid in expired:
            del self._items[rid]


def _running(record: StoredResponse) -> bool:
    """A background response still generating stays, past the count and the age: it is polled, cancelled and
    resumed by its id, and it stores its answer when it ends."""
    return record.run is not None and record.run.active


def items_page(items: list[dict], after: str | None, limit: int, order: str) -> dict:
    """OpenAI's list object over stored input items: `order` asc (oldest first) or desc, up to `limit`
    after the item whose id is `after` (one not among them: ValueError, the caller's 400)."""
    ordered = items if order == "asc" else items[::-1]
    start = [it["id"] for it in ordered].index(after) + 1 if after is not None else 0
    data = ordered[start:start + limit]
    return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None, "has_more": start + limit < len(ordered)}
