"""Reranking request bodies as the peers' clients send them: llama-server's and Jina's / Cohere's /
vLLM's `{query, documents, top_n, return_documents}` (a document a string or `{"text": ...}`), and
vLLM's score API `{text_1, text_2}` (each a string or a list; or `{queries, documents}`, `{queries, items}`,
`{data_1, data_2}`: vLLM's other forms of the same pair). vLLM's `truncate_prompt_tokens` and
`use_activation` on both; Hugging Face TEI's `{query, texts, raw_scores, return_text, truncate}`, which
llama-server takes on the same routes. Cohere's `rank_fields` (v1: object documents, the named fields read) and
`max_tokens_per_doc` (v2: each document cut to that many tokens) apply; unknown fields (Cohere's
max_chunks_per_doc) are ignored and named (hearth.api.ignored_fields)."""

from __future__ import annotations

import json
from typing import Any

from pydantic import StrictBool, StrictInt, StrictStr, model_validator

from hearth.api.errors import APIError
from hearth.api.openai_protocol import _Request


class RerankRequest(_Request):
    model: str | None = None
    query: StrictStr
    documents: list[StrictStr | dict[str, Any]] | None = None
    """Texts, or objects: Jina's and Cohere's `{"text": ...}`, or any whose `rank_fields` are read."""
    rank_fields: list[StrictStr] | None = None
    """Cohere v1's: an object document is read as its fields' `key: value` lines, in this order."""
    max_tokens_per_doc: StrictInt | None = None
    """Cohere v2's: each document cut to its first this many tokens before scoring (Cohere's default 4096 is
    not applied: hearth cuts nothing unasked, and a pair past the context is a 400)."""
    texts: list[StrictStr] | None = None
    """TEI's documents: a body with `texts` is answered in TEI's shape (llama-server's rule)."""
    top_n: StrictInt | None = None
    """The best n results (None or 0: all, vLLM's 0)."""
    return_documents: StrictBool = True
    """Each result's `document: {"text": ...}` (vLLM and Jina send it; Cohere's false drops it)."""
    truncate_prompt_tokens: StrictInt | None = None
    """vLLM's: a pair past k tokens (-1: the context) loses its document's last tokens; None: a 400 instead."""
    use_activation: StrictBool = True
    """vLLM's: false answers the head's logit (llama-server's relevance_score), not its sigmoid."""
    raw_scores: StrictBool = False
    """TEI's use_activation false."""
    return_text: StrictBool = False
    """TEI's: each result's `text`."""
    truncate: StrictBool = False
    """TEI's: true cuts a pair past the context (truncate_prompt_tokens -1)."""

    def document_texts(self) -> list[str]:
        if self.texts is not None:
            return self.texts
        if self.rank_fields is not None and (not self.rank_fields or not all(self.rank_fields)):
            raise APIError(400, "rank_fields: give the names of the document fields to rank on", param="rank_fields")
        return [d if isinstance(d, str) else self._object_text(d, i) for i, d in enumerate(self.documents or [])]

    def _object_text(self, doc: dict[str, Any], i: int) -> str:
        """An object document's text: its `text`, or with rank_fields the fields it has, one `key: value` line
        each in rank_fields' order (Cohere's), a value that is no string as JSON."""
        if self.rank_fields is None:
            if not isinstance(doc.get("text"), str):
                raise APIError(400, f"documents[{i}]: an object document needs a string `text` (or give "
                               "rank_fields to name the fields to rank on)", param="documents")
            return doc["text"]
        lines = [f"{k}: {v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}"
                 for k in self.rank_fields if (v := doc.get(k)) is not None]
        if not lines:
            raise APIError(400, f"documents[{i}]: has none of rank_fields {self.rank_fields}", param="documents")
        return "\n".join(lines)


Texts = StrictStr | list[StrictStr]

SCORE_FORMS = (("text_1", "text_2"), ("queries", "documents"), ("queries", "items"), ("data_1", "data_2"))
"""vLLM's ScoreRequest forms (ScoreTextRequest, ScoreQueriesDocumentsRequest, ScoreQueriesItemsRequest,
ScoreDataRequest): each names the same pair, (first, second), its own way."""


class ScoreRequest(_Request):
    model: str | None = None
    text_1: Texts | None = None
    text_2: Texts | None = None
    queries: Texts | None = None
    documents: Texts | None = None
    items: Texts | None = None
    data_1: Texts | None = None
    data_2: Texts | None = None
    truncate_prompt_tokens: StrictInt | None = None
    use_activation: StrictBool = True

    @model_validator(mode="after")
    def _one_form(self) -> ScoreRequest:
        """Exactly one of SCORE_FORMS, whole: a body mixing two (or with half of one) names its fields."""
        given = [n for n in dict.fromkeys(n for form in SCORE_FORMS for n in form) if getattr(self, n) is not None]
        if not any(set(given) == set(form) for form in SCORE_FORMS):
            forms = ", ".join(" + ".join(form) for form in SCORE_FORMS)
            raise ValueError(f"{' + '.join(given) or 'no texts'}: give the pair as one of {forms}")
        return self

    def pair_fields(self) -> tuple[str, str]:
        """The names the body gave its pair in, (first, second)."""
        return next(f for f in SCORE_FORMS if all(getattr(self, n) is not None for n in f))
