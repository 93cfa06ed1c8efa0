"""POST /completion (and /completions): llama-server's native completion endpoint, which Tabby's llama.cpp
backend and Continue's llama.cpp provider call: a raw prompt (text or token ids, no chat template) in,
llama-server's /completion object out (hearth.api.llama_reply, the reply /infill gives). Nothing is
dropped: a prompt the context does not hold is a 400 naming `prompt`, an n_predict it leaves no room for
one naming `n_predict`."""

from __future__ import annotations

from fastapi import APIRouter, Request

from hearth.api.errors import APIError
from hearth.api.llama_protocol import LlamaCompletionRequest
from hearth.api.llama_reply import check_options, respond
from hearth.api.sampling import prompt_token_ids

router = APIRouter()


@router.post("/completion")
@router.post("/completions")
async def completion(body: LlamaCompletionRequest, request: Request):
    if body.multimodal_data is not None:
        raise APIError(400, "multimodal_data: /completion takes a raw text prompt only here; images go in through "
                            "a chat template: send them as image_url parts to /v1/chat/completions",
                       param="multimodal_data")
    check_options(request, body)
    served = await request.app.state.models.get(body.model)
    return await respond(request, served, _prompt_ids(served, body.prompt), body)


def _prompt_ids(served, prompt: str | list[int | str]) -> list[int]:
    """Text as llama-server tokenizes it (BOS where the model adds one, special tokens parsed); ids as given;
    a mix of both as llama-server's tokenize_mixed: BOS first where the model adds one, each text's tokens
    in its place. One text in a list is that text."""
    texts = [p for p in prompt if isinstance(p, str)] if isinstance(prompt, list) else []
    if texts and len(texts) == len(prompt) > 1:
        raise APIError(400, f"prompt: {len(prompt)} prompts in one request (llama-server answers each) are not "
                            "supported here: send one per request, or use /v1/completions, which takes a list",
                       param="prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and texts:
        prompt = texts[0]
    if texts and isinstance(prompt, list):
        tok = served.tokenizer
        bos = [tok.bos_id] if tok.add_bos and tok.bos_id is not None else []
        ids = [t for p in prompt for t in (served.encode_text(p, add_special_tokens=False) if isinstance(p, str) else [p])]
        prompt = bos + ids  # checked as ids below
    if isinstance(prompt, str):
        ids = served.encode_text(prompt, add_special_tokens=True)
        if not ids:
            raise APIError(400, "prompt: must not be empty", param="prompt")
    else:
        ids = prompt_token_ids(prompt, served.vocab_size)
    if len(ids) >= served.max_model_len:
        raise APIError(400, f"prompt: has {len(ids)} tokens, the context holds {served.max_model_len} and the "
                            f"answer needs at least one more", param="prompt", code="context_length_exceeded")
    return ids
