"""One interface for every drafter: propose(requests, num_tokens) -> {request id: draft tokens}.
Proposers register by method name (`class X(Proposer, method="ngram")`), so a suffix cache, a
draft model or MTP heads are one more subclass."""

from __future__ import annotations

from typing import Protocol


class DraftRequest(Protocol):
    """What a proposer reads of a request (hearth.engine.request.Request has it)."""

    request_id: str
    prompt_token_ids: list[int]
    output_token_ids: list[int]

    @property
    def num_tokens(self) -> int: ...

    def token_slice(self, start: int, n: int) -> list[int]: ...


PROPOSERS: dict[str, type[Proposer]] = {}


class Proposer:
    def __init_subclass__(cls, method: str = "", **kw):
        super().__init_subclass__(**kw)
        if method:
            PROPOSERS[method] = cls

    def __init__(self, config) -> None:
        self.config = config

    def propose(self, requests: list[DraftRequest], num_tokens: list[int]) -> dict[str, list[int] | int]:
        """Up to num_tokens[i] draft tokens to follow requests[i]'s tokens so far (a chain; a
        request with nothing to propose may be left out), or, for a drafter that runs in the runner
        (a draft model), a number of draft slots the runner fills."""
        raise NotImplementedError

    def forget(self, request_id: str) -> None:
        """The request finished: drop whatever was kept for it."""


from hearth.spec_decode import draft_slots, ngram  # noqa: E402,F401  (registers the built-in proposers)
