"""POST /infill: llama-server's code-infill endpoint, which editor plugins call (llama.vscode, llama.vim,
Continue, Tabby): prefix, suffix and other files' text in, the middle out, in llama-server's /completion
shape (hearth.api.llama_reply). The prompt is hearth.api.infill's layout.

What it drops to fit the context it names: `truncated: true` (llama-server's field) and
`hearth.dropped_tokens` {input_extra, input_prefix, input_suffix}."""

from __future__ import annotations

from fastapi import APIRouter, Request

from hearth.api.errors import APIError
from hearth.api.infill import DoesNotFit, Dropped, NoFIMTokens, extra_context, fim_tokens, fit
from hearth.api.infill_protocol import InfillRequest
from hearth.api.llama_reply import answer_room, check_options, respond

router = APIRouter()

ROOM_WITHOUT_LIMIT = 256
"""Tokens kept free for the answer when fitting a request without n_predict (at most a quarter of the
context): it still runs until an end token or the full context, as llama-server's n_predict -1. A
quarter, where a compacted chat keeps an eighth (guard_extras.answer_room): a completion in an editor is
most of what is asked, and its prompt (a file around the cursor) is cut more readily than a dialogue."""


@router.post("/infill")
async def infill(body: InfillRequest, request: Request):
    check_options(request, body)
    served = await request.app.state.models.get(body.model)
    try:
        fim = fim_tokens(served.tokenizer)
    except NoFIMTokens as e:
        raise APIError(400, str(e), param="model") from None
    ids, dropped = _prompt(served, fim, body, answer_room(body))
    return await respond(request, served, ids, body, dropped)


def _prompt(served, fim, body: InfillRequest, limit: int | None) -> tuple[list[int], Dropped]:
    """The FIM prompt in the room the answer leaves (n_predict, else ROOM_WITHOUT_LIMIT)."""
    def plain(text: str) -> list[int]:  # the code is text: "<|endoftext|>" in a file stays characters
        return served.tokenizer.encode(text, add_special_tokens=False, parse_special=False)

    extra = extra_context(fim, plain, [(c.filename, c.text) for c in body.input_extra])
    prompt = served.tokenizer.encode(body.prompt, add_special_tokens=False, parse_special=True)
    answer = limit if limit is not None else min(ROOM_WITHOUT_LIMIT, served.max_model_len // 4)
    try:
        return fit(fim, plain(body.input_prefix), plain(body.input_suffix), prompt, extra,
                   served.max_model_len - answer)
    except DoesNotFit as e:
        field = "n_predict" if limit is not None and e.needed < served.max_model_len else "prompt"
        raise APIError(400, f"{field}: the prompt field, the FIM markers and the repo header take {e.needed} tokens and the "
                            f"answer {answer}, more than the context holds ({served.max_model_len})",
                       param=field, code="context_length_exceeded") from None
