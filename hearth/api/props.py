"""GET /props: llama-server's server properties, which its web UI and clients that speak its wire
(llama.vscode, llama.vim) read first (tools/server/README.md, "GET /props"). As far as hearth has
the data: `default_generation_settings` (the /completion defaults as its `params`, `n_ctx` the
model's context), `total_slots` (sequences decoded together), `model_path`, `chat_template`,
`modalities` (vision with an mmproj), `build_info`, `is_sleeping`. With several models `?model=NAME` picks one,
as llama-server's router mode asks (the default model otherwise). POST /props (changing settings,
which llama-server takes only under --props) is refused: hearth has no setting to change there."""

from __future__ import annotations

from fastapi import APIRouter, Request

from hearth.api.errors import APIError
from hearth.api.llama_protocol import LlamaOptions
from hearth.api.llama_reply import generation_settings, with_server_defaults

router = APIRouter()


@router.get("/props")
async def props(request: Request, model: str | None = None):
    served = await request.app.state.models.get(model)
    options = with_server_defaults(LlamaOptions(), request.app.state.limits.defaults)  # hearth serve --temp ...
    defaults = {**generation_settings(options), "max_tokens": -1, "n_probs": 0}  # samplers: the whole chain
    return {
        "default_generation_settings": {
            "id": 0, "id_task": -1, "n_ctx": served.max_model_len, "speculative": served.speculative,
            "is_processing": False, "params": defaults, "prompt": "",
            "next_token": {"has_next_token": True, "has_new_line": False, "n_remain": -1, "n_decoded": 0,
                           "stopping_word": ""}},
        "total_slots": served.total_slots,
        "model_path": served.path,
        "model": served.name,  # hearth's: the id /v1/models lists and requests name it by
        "chat_template": served.template_source,
        "chat_template_caps": dict.fromkeys(("supports_tools", "supports_tool_calls"), served.template_supports_tools),
        "modalities": {"vision": served.vision is not None, "audio": False},
        "build_info": request.app.state.config.build_info,
        "is_sleeping": False,
    }


@router.post("/props")
async def change_props():
    raise APIError(405, "POST /props: changing the server's properties is not supported (llama-server takes it only "
                        "under --props, and hearth has no property to change there); GET /props reads them")
