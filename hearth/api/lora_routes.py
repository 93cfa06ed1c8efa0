"""llama-server's LoRA adapter routes: GET /lora-adapters lists the served model's adapters (id, path,
global scale); POST /lora-adapters sets the global scales from [{"id": 0, "scale": 0.5}, ...], the
adapters not listed at 0 (llama-server's rule), for requests that come after it (a request's own
`lora` still wins). `?model=` picks a model when several are served."""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import RootModel

from hearth.api.errors import APIError
from hearth.api.openai_protocol import LoraEntry
from hearth.api.sampling import check_lora_before_load
from hearth.sampling_params import InvalidSamplingParams

router = APIRouter()


class LoraScales(RootModel[list[LoraEntry]]):
    pass


@router.get("/lora-adapters")
async def list_adapters(request: Request, model: str | None = None):
    served = await request.app.state.models.get(model)
    return served.lora.listing() if served.lora is not None else []


@router.post("/lora-adapters")
async def set_scales(body: LoraScales, request: Request, model: str | None = None):
    known = request.app.state.models.known(model)  # before the load: the server's flags say its adapters
    scales = {e.id: e.scale for e in body.root}
    if known.lora_count == 0:
        raise _none(known.name)
    check_lora_before_load(known, scales, "lora-adapters")
    served = await request.app.state.models.get(model)
    if served.lora is None:
        raise _none(served.name)
    try:
        served.lora.set_scales(scales)
    except InvalidSamplingParams as e:
        raise APIError(400, f"{e.field}: {e.why}", param=e.field) from None
    return {"success": True}


def _none(name: str) -> APIError:
    return APIError(400, f"{name} has no LoRA adapters (start the server with --lora FILE)", param="lora")
