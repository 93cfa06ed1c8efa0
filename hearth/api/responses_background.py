"""Background responses (OpenAI's `background: true`): POST /v1/responses answers at once with status
"queued" while the answer is generated in a task of the server's loop, tied to no connection. GET
/v1/responses/{id} polls it, POST .../cancel stops it (status "cancelled"), and a streamed one keeps its
events, so a client that lost its connection resumes with GET ...?stream=true&starting_after=N.

The Run rides on its stored record (StoredResponse.run) from the first answer to the last, so a GET, a
cancel and a reconnect all find it by the response's id."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from hearth.errors import HearthError

ACTIVE = ("queued", "in_progress")
_TASKS: set[asyncio.Task] = set()
"""Runs not yet ended: the loop holds only weak references to its tasks."""


class Run:
    def __init__(self, reply, streamed: bool):
        """reply: hearth.api.responses_routes' _Reply; streamed: whether its stream events are kept."""
        self.reply, self.streamed = reply, streamed
        self.status = "queued"
        self.events: list[str] = []
        """Each stream event's SSE text, at its sequence_number (streamed runs only)."""
        self._changed = asyncio.Event()
        reply.run = self
        self.task = asyncio.get_running_loop().create_task(self._generate())
        _TASKS.add(self.task)
        self.task.add_done_callback(_TASKS.discard)

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    def body(self) -> dict:
        """The response object as it stands (its final one once stored)."""
        return self.reply.response(self.status)

    async def _generate(self) -> None:
        try:
            if self.streamed:
                async for sse in self.reply.events():
                    self.status = "in_progress"
                    self.events.append(sse)
                    self._wake()
            else:
                self.status = "in_progress"
                await self.reply.whole()
            if self.reply.error is None:
                self.status = self.reply.status
            else:
                self._end("failed")
        except HearthError as e:  # whole() raises what a stream reports as an error event
            self.reply.error = e
            self._end("failed")
        except asyncio.CancelledError:
            self._end("cancelled")
        finally:
            self._wake()

    def _end(self, status: str) -> None:
        self.status = status
        self.reply.store_unfinished(status)

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def cancel(self) -> dict:
        """Stops an active run (the engine request aborted); the response as it then stands."""
        if self.active:
            self.reply.gen.abort()
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        return self.body()

    async def follow(self, after: int = -1) -> AsyncIterator[str]:
        """The stream's events after sequence number `after`, then each one as it comes, until the run ends."""
        at = after + 1
        while True:
            changed = self._changed
            while at < len(self.events):
                yield self.events[at]
                at += 1
            if not self.active:
                return
            await changed.wait()
