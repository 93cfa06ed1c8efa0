"""Fill-in-the-middle prompts, laid out as llama-server's /infill lays them out (format_prompt_infill,
tools/server/server-common.cpp), for /infill and for /v1/completions' `suffix`:

    [FIM_REP]myproject\\n                       the repo-level pattern (Qwen2.5-Coder's report,
    [FIM_SEP]{filename}\\n{text}   per chunk     arXiv:2409.12186) where the model has FIM_REP/FIM_SEP;
    [FIM_SEP]filename\\n                        else each chunk is "\\n\\n--- snippet ---\\n\\n"{text}
    [BOS][FIM_PRE]{prefix}{prompt}[FIM_SUF]{suffix}[FIM_MID]

"myproject", "filename" and a chunk's default name "tmp" are llama.cpp's fixed words; BOS only where
the model adds one, after the extra context as llama.cpp puts it.

Fitting the context (`fit`): llama-server cuts every request to a batch (the prefix's last 3/4 of
n_batch, the suffix's first 1/4, the extra context's last n_ctx - n_batch - 2 n_predict tokens) and
tells no one. hearth keeps everything that fits the room the request leaves; only past it does it drop,
in llama.cpp's order and proportions: the input_extra chunks' oldest tokens first, then the prefix's
start and the suffix's end, 3:1. The route names what was dropped in its reply; the prompt field, the
FIM markers and the repo header around the chunks are never dropped (a request they do not fit is a 400)."""

from __future__ import annotations

from dataclasses import dataclass

from hearth.api.errors import APIError

REPO_NAME = "myproject\n"
CURRENT_FILE = "filename\n"
CHUNK_NAME = "tmp"
SNIPPET = "\n\n--- snippet ---\n\n"
"""A chunk's header where the model has no FIM_SEP (llama.cpp's k_chunk_prefix_str)."""
PREFIX_SHARE = 3 / 4
"""The prefix's share of the room for prefix + suffix when both do not fit (llama.cpp's 3:1)."""


class NoFIMTokens(Exception):
    """The model lacks FIM_PRE, FIM_SUF or FIM_MID; the message is llama-server's, its clauses trailing
    space included (clients match on it), `.missing` those clauses."""

    def __init__(self, missing: str):
        super().__init__(f"Infill is not supported by this model: {missing}")
        self.missing = missing.strip()


class DoesNotFit(Exception):
    """The parts that are never dropped (BOS, markers, the prompt field) leave no room: `.needed` tokens."""

    def __init__(self, needed: int, room: int):
        super().__init__(f"needs {needed} tokens for the FIM markers and the prompt alone, {room} are free")
        self.needed, self.room = needed, room


@dataclass(frozen=True, slots=True)
class FIMTokens:
    pre: int
    suf: int
    mid: int
    rep: int | None
    sep: int | None
    bos: int | None
    """The BOS the model adds to a prompt (None: it adds none)."""


def fim_tokens(tokenizer) -> FIMTokens:
    """The model's FIM ids (hearth.loader.vocab found them by GGUF key or by llama.cpp's token texts)."""
    special = getattr(tokenizer, "special", None)
    ids = {slot: special(slot) if special else None
           for slot in ("fim_pre", "fim_suf", "fim_mid", "fim_rep", "fim_sep")}
    missing = "".join(f"{what} token is missing. " for slot, what in
                      (("fim_pre", "prefix"), ("fim_suf", "suffix"), ("fim_mid", "middle")) if ids[slot] is None)
    if missing:
        raise NoFIMTokens(missing)
    bos = tokenizer.bos_id if getattr(tokenizer, "add_bos", False) else None
    return FIMTokens(ids["fim_pre"], ids["fim_suf"], ids["fim_mid"], ids["fim_rep"], ids["fim_sep"], bos)


def has_fim(tokenizer) -> bool:
    try:
        fim_tokens(tokenizer)
    except NoFIMTokens:
        return False
    return True


@dataclass(frozen=True, slots=True)
class Extra:
    """The extra context as ids, in three parts: the repo header and the current file's separator are
    markers (fixed, as the FIM markers), the chunks between them the client's input_extra (droppable)."""
    head: tuple[int, ...] = ()
    """FIM_REP "myproject\\n" (none without FIM_REP)."""
    chunks: tuple[int, ...] = ()
    """Each chunk's file line (or snippet line) and text, oldest first."""
    tail: tuple[int, ...] = ()
    """FIM_SEP "filename\\n" (none without FIM_SEP)."""

    @property
    def ids(self) -> list[int]:
        return [*self.head, *self.chunks, *self.tail]


def extra_context(fim: FIMTokens, encode, chunks: list[tuple[str, str]]) -> Extra:
    """The repo-level header and input_extra's (filename, text) chunks, as ids; `encode(text)` gives a
    text's ids without special tokens added or parsed (the code is plain text, as llama.cpp reads it)."""
    head = (fim.rep, *encode(REPO_NAME)) if fim.rep is not None else ()
    ids: list[int] = []
    for filename, text in chunks:
        ids += [fim.sep, *encode(f"{filename}\n")] if fim.sep is not None else encode(SNIPPET)
        ids += encode(text)
    tail = (fim.sep, *encode(CURRENT_FILE)) if fim.sep is not None else ()
    return Extra(head, tuple(ids), tail)


@dataclass(frozen=True, slots=True)
class Dropped:
    """Tokens left out to fit the context, by the request field they came from."""
    input_extra: int = 0
    input_prefix: int = 0
    input_suffix: int = 0

    def __bool__(self) -> bool:
        return bool(self.input_extra or self.input_prefix or self.input_suffix)

    def as_dict(self) -> dict[str, int]:
        return {"input_extra": self.input_extra, "input_prefix": self.input_prefix, "input_suffix": self.input_suffix}


def layout(fim: FIMTokens, prefix: list[int], suffix: list[int], prompt: list[int] = (),
           extra: list[int] = ()) -> list[int]:
    """The whole FIM prompt (the module docstring's picture), nothing dropped."""
    head = [*extra, *([fim.bos] if fim.bos is not None else [])]
    return [*head, fim.pre, *prefix, *prompt, fim.suf, *suffix, fim.mid]


def fit(fim: FIMTokens, prefix: list[int], suffix: list[int], prompt: list[int], extra: Extra,
        room: int) -> tuple[list[int], Dropped]:
    """The FIM prompt in at most `room` tokens, and what was dropped to get there (see the module
    docstring): the chunks' oldest tokens, then prefix and suffix; what the client did not send (the
    repo header, the markers) is neither dropped nor counted. DoesNotFit when the markers and the
    prompt alone exceed it."""
    chunks = extra.chunks
    fixed = len(extra.head) + len(extra.tail) + (fim.bos is not None) + 3 + len(prompt)
    if fixed > room:
        raise DoesNotFit(fixed, room)
    free = room - fixed
    keep_pre, keep_suf = len(prefix), len(suffix)
    if keep_pre + keep_suf > free:
        keep_suf = min(keep_suf, free - int(free * PREFIX_SHARE))
        keep_pre = min(keep_pre, free - keep_suf)
        keep_suf = min(len(suffix), free - keep_pre)  # a short prefix leaves its share to the suffix
    keep_extra = min(len(chunks), free - keep_pre - keep_suf)
    dropped = Dropped(len(chunks) - keep_extra, len(prefix) - keep_pre, len(suffix) - keep_suf)
    kept = [*extra.head, *chunks[len(chunks) - keep_extra:], *extra.tail]
    ids = layout(fim, prefix[len(prefix) - keep_pre:], suffix[:keep_suf], prompt, kept)
    return ids, dropped


def suffix_fim(served) -> FIMTokens:
    """The FIM tokens for a request's `suffix` (OpenAI's insert mode, Ollama's /api/generate); a model
    without them is a 400 naming `suffix`, as vLLM answers it."""
    try:
        return fim_tokens(served.tokenizer)
    except NoFIMTokens as e:
        raise APIError(400, f"suffix: is not supported by model {served.name!r}, which has no fill-in-the-middle "
                            f"tokens ({e.missing})", param="suffix") from None


def suffix_prompt(served, fim: FIMTokens, prefix: list[int], suffix: str) -> list[int]:
    """A prompt's ids (the code before) with `suffix` (the code after) in /infill's layout without
    input_extra, so every route runs the same tokens; the suffix is plain text, as /infill reads it."""
    def encode(text: str) -> list[int]:
        return served.encode_text(text, add_special_tokens=False, parse_special=False)
    return layout(fim, prefix, encode(suffix), extra=extra_context(fim, encode, []).ids)
