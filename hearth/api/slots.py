"""POST /slots/save and /slots/restore: a conversation's KV state to a named file under
--kv-disk-dir and back, as llama-server's slot save/restore (`POST /slots/{id}?action=save|restore`
with {"filename": ...} is taken too; hearth has no slots, so the id is ignored). Behind the API key
like every route but /health.

save: the conversation (`messages` (+ `tools`) rendered as a chat request would be, or `prompt`
text or token ids) is prefilled once through the engine (its cached blocks are reused, so this is
cheap when it was just served), then its full blocks are written to `saved/<name>.hkv`. Without
one, as llama-server's `{"filename": ...}` alone, the sequence that ended last (prompt and answer:
what llama-server's single slot holds) is saved as far as its blocks are still cached, with no
prefill.
restore: the file's blocks go back into the disk tier; the next request with that prefix reports
them in `cached_tokens` and skips their prefill."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Literal

from fastapi import APIRouter, Request
from pydantic import StrictBool, StrictInt

from hearth.api.errors import APIError
from hearth.api.generate import Generation
from hearth.api.openai_protocol import _Request
from hearth.api.media_parts import RequestImages
from hearth.api.openai_routes import chat_history, conversation_ids, one_of_prompt_and_messages
from hearth.api.read_before_load import read_before_load
from hearth.kvstore.snapshot import SnapshotError, SnapshotNameError, SnapshotNotFoundError, check_name
from hearth.sampling_params import SamplingParams

router = APIRouter()


class SlotRequest(_Request):
    name: str | None = None
    filename: str | None = None
    """llama-server's name for `name`."""
    model: str | None = None
    prompt: str | list[StrictInt] | None = None
    messages: list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    add_generation_prompt: StrictBool = True
    add_special_tokens: StrictBool = True


@router.post("/slots/save")
async def save(body: SlotRequest, request: Request):
    name, field = _named(request, body)
    if body.prompt is not None or body.messages is not None:
        one_of_prompt_and_messages(body)
    reading = read_before_load(request.app.state.models, body.model, lambda images: _text_history(body, images))
    async with request.app.state.models.lease(body.model) as served:  # loaded until the export is written
        snapshots = _store(served)
        if served.lora is not None and any(served.lora.scales):  # its blocks are cached under the adapters' keys
            raise APIError(400, "model: slots save the base model's K/V, and this server runs LoRA adapters "
                           "(set their scales to 0 with POST /lora-adapters to save)", param="model")
        t0 = time.perf_counter()
        if body.prompt is None and body.messages is None:  # llama-server's form: the slot's KV as it is
            ids = served.engine.last_sequence()
            if not ids:
                raise APIError(400, "nothing was served yet to save: give the conversation as messages or "
                               "prompt", param="messages")
        else:
            history, _ = reading.on(served)
            ids = conversation_ids(served, body, request.app.state.config.tool_guard, history)
            await Generation(served.engine, ids, SamplingParams(max_tokens=1, temperature=0)).collect()
        payloads = await served.engine.export_prefix(ids)
        info = await _run(snapshots.save, name, field, ids, payloads)
    return {"name": name, "filename": info.path.name, "n_saved": info.num_tokens, "n_written": info.num_bytes,
            "timings": {"save_ms": round((time.perf_counter() - t0) * 1000, 3)}}


@router.post("/slots/restore")
async def restore(body: SlotRequest, request: Request):
    name, field = _named(request, body)
    async with request.app.state.models.lease(body.model) as served:
        snapshots = _store(served)
        t0 = time.perf_counter()
        info = await _run(snapshots.restore, name, field)
    return {"name": name, "filename": info.path.name, "n_restored": info.num_tokens, "n_read": info.num_bytes,
            "timings": {"restore_ms": round((time.perf_counter() - t0) * 1000, 3)}}


@router.post("/slots/{slot_id}")
async def slot_action(slot_id: int, action: Literal["save", "restore"], body: SlotRequest, request: Request):
    return await (save if action == "save" else restore)(body, request)


def _text_history(body: SlotRequest, images: RequestImages) -> list[dict] | None:
    """body's messages (None: it has none), with no image: a snapshot is keyed by token ids, where an image's
    placeholder rows would match any image."""
    history = chat_history(body, images)
    if images:
        raise APIError(400, f"{images.parts[0].field}: a slot saves a text conversation (images are not saved)",
                       param=images.parts[0].field)
    return history


def _named(request: Request, body: SlotRequest) -> tuple[str, str]:
    """(name, the field it came in), checked before the model loads (as an unknown model's 404 and a server
    without a disk tier), or a 400."""
    known = request.app.state.models.known(body.model)
    field = "name" if body.name is not None or body.filename is None else "filename"
    name = body.name if field == "name" else body.filename
    if name is None:
        raise APIError(400, "name: is required", param="name")
    try:
        check_name(name)
    except SnapshotNameError as e:
        raise APIError(400, f"{field}: {e}", param=field) from None
    if known.kv_disk is False:  # the server's flag: no model has one (None: not known, the loaded model says)
        raise _no_disk()
    return name, field


def _store(served):
    """The model's snapshot store, or a 400: it has no disk tier (a model with recurrent layers runs without)."""
    if served.snapshots is None:
        raise _no_disk()
    return served.snapshots


def _no_disk() -> APIError:
    return APIError(400, "saving and restoring KV state needs a disk tier: start the server with --kv-disk-dir DIR "
                    "(a model with recurrent layers, as qwen35's, runs without one)", code="kv_disk_disabled")


async def _run(method, name: str, field: str, *args):
    try:
        return await asyncio.to_thread(method, name, *args)
    except SnapshotNotFoundError as e:
        raise APIError(404, f"{field}: {e}", param=field, code="not_found") from None
    except SnapshotError as e:
        raise APIError(400, f"{field}: {e}", param=field) from None
