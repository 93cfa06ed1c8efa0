"""One interface for every drafter: propose(requests, num_tokens) -> {request id: draft tokens}.
Proposers register by method name (`class X(Proposer, method="ngram")`), so a suffix cache, a
draft model or MTP heads are one more subclass."""

from __future__ import annotations

from typing import Protocol

from hearth.sampling_params import SamplingParams
from hearth.spec_decode.tree import DraftTree


class DraftRequest(Protocol):
    """What a proposer reads of a request (hearth.engine.request.Request has it)."""

    request_id: str
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    params: SamplingParams

    @property
    def num_tokens(self) -> int: ...

    def token_slice(self, start: int, n: int) -> list[int]: ...


class TextCodec(Protocol):
    """Token ids <-> text (hearth.loader.tokenizer.Tokenizer has it): for a proposer that edits
    drafts as text."""

    def decode(self, ids: list[int]) -> str: ...

    def encode(self, text: str, add_special_tokens: bool = True, parse_special: bool = True) -> list[int]: ...


PROPOSERS: dict[str, type[Proposer]] = {}


class Proposer:
    def __init_subclass__(cls, method: str = "", **kw):
        super().__init_subclass__(**kw)
        if method:
            PROPOSERS[method] = cls

    def __init__(self, config, codec: TextCodec | None = None) -> None:
        self.config = config
        self.codec = codec

    def propose(self, requests: list[DraftRequest], num_tokens: list[int]) -> dict[str, list[int] | DraftTree | int]:
        """Up to num_tokens[i] draft tokens to follow requests[i]'s tokens so far (a chain, or a
        DraftTree of at most that many nodes; a request with nothing to propose may be left out;
        num_tokens[i] may be 0: read the request, propose nothing), or, for a drafter that runs in
        the runner (a draft model), a number of draft slots the runner fills."""
        raise NotImplementedError

    def track(self, requests: list[DraftRequest]) -> None:
        """Requests decoding this step without being offered drafts (paused, or a step too big to
        draft in): a proposer that learns from every request's text reads them here."""

    def forget(self, request_id: str) -> None:
        """The request finished: drop whatever was kept for it."""


from hearth.spec_decode import draft_slots, mtp, ngram, suffix  # noqa: E402,F401  (registers the built-in proposers)
