"""GET /v1/models, /v1/models/{id}; POST /tokenize, /detokenize (vLLM's shapes, and llama-server's:
`content` in, `tokens` out; `tokens` in, `content` out). Chat and
completions live in openai_chat.py and openai_completions.py."""

from __future__ import annotations

from fastapi import APIRouter, Request

from hearth.api.errors import APIError
from hearth.api.extensions import Extensions
from hearth.api.guard_extras import RequestGuard
from hearth.api.logprobs import token_bytes
from hearth.api.media_prompt import shown
from hearth.api.messages import openai_messages
from hearth.api.model_cards import card
from hearth.api.openai_protocol import ApplyTemplateRequest, DetokenizeRequest, TokenizeRequest
from hearth.api.read_before_load import read_before_load
from hearth.api.sampling import outside_vocabulary
from hearth.api.tools import openai_tools, plan_tools, prompt_messages

router = APIRouter()


@router.api_route("/v1/models", methods=["GET", "HEAD"])
@router.api_route("/models", methods=["GET", "HEAD"], include_in_schema=False)  # llama-server's too
async def list_models(request: Request):
    return {"object": "list", "data": request.app.state.models.cards()}


@router.get("/v1/models/{model_id:path}")
async def get_model(model_id: str, request: Request):
    pool = request.app.state.models
    return card(pool.resolve(model_id), model_id)


@router.post("/tokenize")
async def tokenize(body: TokenizeRequest, request: Request):
    request.app.state.models.known(body.model)  # before the load, as every check here: an unknown model's 404
    if body.content is not None and (body.prompt is not None or body.messages is not None):
        raise APIError(400, "content: give content (llama-server's) or prompt/messages, not both", param="content")
    if body.content is None:
        one_of_prompt_and_messages(body, APIError(400, "content: give content (llama-server's), prompt or messages",
                                                  param="content"))
    # a chat's images count their rows, as the chat's prompt holds them
    reading = read_before_load(request.app.state.models, body.model, lambda images: chat_history(body, images))
    served = await request.app.state.models.get(body.model)
    if body.content is not None:  # llama-server's shape
        ids = served.encode_text(body.content, add_special_tokens=body.add_special)
    else:
        history, images = reading.on(served)
        await served.load_images(images)
        ids = conversation_ids(served, body, request.app.state.config.tool_guard, history, images)
    tokens = [_piece(served.tokenizer, i) for i in ids] if body.with_pieces else ids
    return {"count": len(ids), "max_model_len": served.max_model_len, "tokens": tokens}


def _piece(tokenizer, token_id: int) -> dict:
    """llama-server's with_pieces entry: a token's text, or its bytes as a list where they are not UTF-8
    (a byte-fallback token, a piece of a multi-byte character)."""
    raw = token_bytes(tokenizer, token_id)
    try:
        return {"id": token_id, "piece": raw.decode("utf-8")}
    except UnicodeDecodeError:
        return {"id": token_id, "piece": list(raw)}


def chat_history(body, images=None) -> list[dict] | None:
    """body's `messages` checked (None: it has none), their images added to `images` (load them next), and its
    `tools` as the chat routes check them (openai_tools): the routes read this before the load."""
    if body.messages is None:
        return None
    history = openai_messages(body.messages, images=images)
    openai_tools(body.tools)  # in the chat's order, messages first; rendered_chat reads them again once loaded
    return history


def conversation_ids(served, body, server_guard, history: list[dict] | None = None, images=None) -> list[int]:
    """The prompt ids of a body with exactly one of `prompt` (text, or token ids) and `messages`
    (+ `tools`), rendered as a chat request with the same fields would render them under the server's
    tool guard (`server_guard`: its tool cap, its system sentence), so a saved slot is the chat's prefix.
    history, images: body's messages as chat_history read them, and their images, loaded (None: read here,
    images refused)."""
    one_of_prompt_and_messages(body)
    if isinstance(body.prompt, list):
        return list(body.prompt)
    if body.prompt is not None:
        return served.encode_text(body.prompt, add_special_tokens=body.add_special_tokens)
    return rendered_chat(served, body, server_guard, history, images)[1]


def one_of_prompt_and_messages(body, neither: APIError | None = None) -> None:
    """A body that gives a conversation gives exactly one of `prompt` and `messages`; `neither`: the 400 for
    none, where the route has other fields. Needs no model: a route runs it before the load."""
    given = (body.prompt is not None) + (body.messages is not None)
    if given == 0 and neither is not None:
        raise neither
    if given != 1:
        raise APIError(400, "give exactly one of prompt and messages", param="prompt")


def rendered_chat(served, body, server_guard, history: list[dict] | None = None, images=None) -> tuple[str, list[int]]:
    """(prompt text, ids) of body's `messages` (+ `tools`) as a chat request renders them (history, images:
    see conversation_ids)."""
    history = chat_history(body) if history is None else history
    guard = RequestGuard(Extensions(server_guard), openai_tools(body.tools), history)
    plan = plan_tools(served, guard.tools, None)
    guard.prompt_hint(plan, True)

    cont = getattr(body, "continue_final_message", False)  # /apply-template's preview of a continued answer

    def render(msgs: list[dict]) -> tuple[str, list[int]]:
        text = served.render_chat(prompt_messages(served, plan, msgs), plan.tools if plan.in_template else None,
                                  add_generation_prompt=body.add_generation_prompt and not cont, continue_final=cont)
        return text, served.encode_chat_text(text, images, msgs)
    return guard.fit(render, history, served.max_model_len, None)


@router.post("/apply-template")
async def apply_template(body: ApplyTemplateRequest, request: Request):
    """llama-server's: the prompt a chat request's messages render to, nothing run."""
    reading = read_before_load(request.app.state.models, body.model, lambda images: chat_history(body, images))
    served = await request.app.state.models.get(body.model)
    history, images = reading.on(served)
    await served.load_images(images)
    text, _ = rendered_chat(served, body, request.app.state.config.tool_guard, history, images)
    return {"prompt": shown(text, images)}  # an image where llama-server's marker shows it


@router.post("/detokenize")
async def detokenize(body: DetokenizeRequest, request: Request):
    _check_tokens(body.tokens, request.app.state.models.known(body.model))  # before the load: from its header
    served = await request.app.state.models.get(body.model)
    _check_tokens(body.tokens, served)
    text = served.tokenizer.decode(body.tokens)
    return {"prompt": text, "content": text}  # vLLM's name and llama-server's


def _check_tokens(tokens: list[int], model) -> None:
    """Each token in the vocabulary of `model` (a ServedModel, or hearth.api.model_spec.Known: None, not known)."""
    if why := outside_vocabulary(tokens, model.vocab_size):
        raise APIError(400, f"tokens: {why}", param="tokens")
