"""A reranker's pair prompt from its GGUF's rerank template (`tokenizer.chat_template.rerank`, which llama.cpp's
converter writes for Qwen3-Reranker: a system line, `<Query>: {query}`, `<Document>: {document}`, then the
assistant's empty think block, so the next token is its "yes" or "no"). As llama-server's format_prompt_rerank:
the query and the document go into the template's `{query}` and `{document}` places and the whole text is
tokenized with no BOS added and special tokens parsed (the template's <|im_start|> ..., and any a query or a
document writes: they are one text there). A cut drops the document's last tokens and keeps the template's end.
Plain Python over a tokenizer (hearth.engine.pairs picks this format where the file has the template)."""

from __future__ import annotations

import re

PLACES = re.compile(r"\{query\}|\{document\}")


def template_text(template: str, query: str, document: str) -> str:
    """The template with both texts in place, in one pass: a query that writes "{document}" keeps it as text
    (llama-server replaces the query first, then every "{document}", the query's own too)."""
    return PLACES.sub(lambda m: query if m.group() == "{query}" else document, template)


class TemplatePair:
    """The pair format of a file with a rerank template (hearth.engine.pairs.SepPair's interface)."""

    def __init__(self, tokenizer, template: str):
        self.tokenizer, self.template = tokenizer, template

    def _ids(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False, parse_special=True)

    def prompt(self, query: str, document: str) -> tuple[list[int], int | None]:
        """(ids, None): no token types, so no second-text start (a decoder reads none)."""
        return self._ids(template_text(self.template, query, document)), None

    def fixed(self, query: str, start: int | None) -> str:
        """What takes the room a document cannot have, for an error's words."""
        return f"the rerank template with its query takes {len(self.prompt(query, '')[0])} tokens"

    def first_tokens(self, query: str, document: str, ids: list[int], start: int | None,
                     n: int) -> tuple[list[int], str]:
        """(the prompt, the document) with the document cut to its first n tokens (Cohere's max_tokens_per_doc)."""
        doc = self._ids(document)
        if len(doc) <= n:
            return ids, document
        document = self._text(doc[:n])
        return self.prompt(query, document)[0], document

    def cut(self, query: str, document: str, ids: list[int], start: int | None, limit: int) -> list[int] | None:
        """The prompt in at most `limit` tokens, its document's last tokens dropped (the query and the template
        whole); None where not one document token fits. The document's text is cut and the prompt tokenized
        again, since a document's last tokens may merge with the template's text after it."""
        doc = self._ids(document)
        keep = len(doc)
        while len(ids) > limit:
            keep -= len(ids) - limit  # each token over: one document token less (a merge at the edge: another turn)
            if keep < 1:
                return None
            ids = self.prompt(query, self._text(doc[:keep]))[0]
        return ids

    def _text(self, ids: list[int]) -> str:
        # a cut inside a character drops its bytes: they would decode to U+FFFD, a character the document lacks
        return self.tokenizer.decode_bytes(ids).decode("utf-8", errors="ignore")
