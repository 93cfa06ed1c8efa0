"""Background responses (OpenAI's `background: true`): POST /v1/responses answers at once with status
"queued" while the answer is generated in a task of the server's loop, tied to no connection. GET
/v1/responses/{id} polls it, POST .../cancel stops it (status "cancelled"), and a streamed one keeps its
events, so a client that lost its connection resumes with GET ...?stream=true&starting_after=N.

The Run rides on its stored record (StoredResponse.run) from the first answer to the last, so a GET, a
cancel and a reconnect all find it by the response's id."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from hearth.engine.async_engine import EngineStepError
from hearth.errors import HearthError

log = logging.getLogger("hearth.api")

ACTIVE = ("queued", "in_progress")
TERMINAL_EVENTS = {"cancelled": "response.cancelled", "failed": "response.failed"}
"""A streamed run that ends so -> its last event, with the response as it then stands (as response.completed
ends a whole answer; response.cancelled: OpenAI's name for a cancelled background response's event), so a
follower never sees the stream just stop. A run an engine error ended has its response.failed already
(_Reply.events: the `error` event, then response.failed)."""


class Run:
    def __init__(self, reply, streamed: bool, tasks: set[asyncio.Task]):
        """reply: hearth.api.responses_routes' _Reply; streamed: whether its stream events are kept; tasks: the
        app's runs not yet ended (the loop holds only weak references to its tasks; the app cancels them at
        shutdown)."""
        self.reply, self.streamed = reply, streamed
        self.status = "queued"
        self.final: dict | None = None
        """The response once ended: a run keeps no reference to its model then (a stored record outlives it)."""
        self.events: list[str] = []
        """Each stream event's SSE text, at its sequence_number (streamed runs only)."""
        self._changed = asyncio.Event()
        reply.run = self
        self.task = asyncio.get_running_loop().create_task(self._generate())
        tasks.add(self.task)
        self.task.add_done_callback(tasks.discard)

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    def body(self) -> dict:
        """The response object as it stands."""
        return self.final if self.final is not None else self.reply.response(self.status)

    async def _generate(self) -> None:
        reply = self.reply
        try:
            if self.streamed:
                async for sse in reply.events(first="queued"):
                    self.status = "in_progress"
                    self.events.append(sse)
                    self._wake()
            else:
                self.status = "in_progress"
                await reply.whole()
            if reply.error is None:
                self.status = reply.status
            else:
                self._end("failed")
        except HearthError as e:  # whole() raises what a stream reports as an error event
            reply.error = e
            self._end("failed")
        except asyncio.CancelledError:
            self._end("cancelled")
        except Exception as e:  # a bug: the run ends failed, never stays in_progress with its followers waiting
            log.exception("background response %s failed", reply.id)
            reply.error = EngineStepError(f"the answer failed: {type(e).__name__}: {e}")
            self._end("failed")
        finally:
            self.final = reply.ended or reply.response(self.status)
            if self.streamed and self.status in TERMINAL_EVENTS and not self._ended_by_error():
                self.events.append(reply._event({"type": TERMINAL_EVENTS[self.status], "response": self.final}))
            self.reply = None
            self._wake()

    def _ended_by_error(self) -> bool:
        """The stream ended on an engine error's response.failed already (_Reply.events)."""
        return bool(self.events) and self.events[-1].startswith("event: response.failed\n")

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


async def stop_all(tasks: set[asyncio.Task]) -> None:
    """At shutdown: the runs still going are cancelled (each ends as a cancelled response)."""
    for task in list(tasks):
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
