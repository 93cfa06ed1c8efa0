"""The edits a request's output made to the text it copies (hearth.spec_decode.ngram's CopyCursor
learns them), and the copy drafted with them made.

An edit is learned as token spans: the copy's skipped span -> what the output wrote instead. A rename
then shows up in other tokens too (" readings" learned, "(readings", "load_readings" and
"reading.sensor" to come), so with the tokenizer at hand the spans become word edits made in the
copy's text, which is tokenized again (word_edit: " readings" -> " measurements" renames "reading"
wherever it stands as a word or a part of an identifier, plural or not; a short edit only its whole
identifier). An edit is not made where its new word stands already. Spans with no letter or digit
edited (punctuation) stay token edits, made first."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # proposer.py imports the proposers, ngram.py this
    from hearth.spec_decode.proposer import TextCodec

MAX_EDITS = 16
"""Edits a request keeps (the oldest go first): one learned from a chance match lives on otherwise."""
MIN_STEM = 3
"""An edit of this many characters or fewer covers the whole identifier (a stem that short would
match inside too many others)."""
_WORD = re.compile(r"\w")
_ALNUM = re.compile(r"[^\W_]")


class Edits(dict):
    """A request's learned edits, span of the copy -> the output's span (tuples of token ids), in
    the order learned; shared by the request's copy cursors. The word edits and their pattern are
    derived once per change, not per step."""

    def __init__(self) -> None:
        super().__init__()
        self._made: tuple = ()
        self._words: dict[str, str] = {}
        self._tokens: dict[tuple[int, ...], tuple[int, ...]] = {}
        self._pattern: re.Pattern | None = None

    def __setitem__(self, old: tuple[int, ...], new: tuple[int, ...]) -> None:
        self.pop(old, None)  # re-learned: the newest again
        super().__setitem__(old, new)
        while len(self) > MAX_EDITS:
            del self[next(iter(self))]

    def copy_of(self, tokens: list[int], start: int, k: int, codec: TextCodec | None) -> list[int]:
        """k tokens of the copy from `start` with the edits made: token edits, then (with a codec)
        word edits on the text from the token where the first one matches."""
        if not self:
            return tokens[start:start + k]
        self._derive(codec)
        out = _token_copy(tokens, start, 2 * k + 4 if self._pattern else k, self._tokens)
        if self._pattern is None:
            return out[:k]
        pieces = [codec.decode([t]) for t in out]
        text = "".join(pieces)
        m = self._pattern.search(text)
        if m is None or "\ufffd" in text:  # nothing to rename here, or a character split across tokens
            return out[:k]
        keep, at = 0, 0
        while at + len(pieces[keep]) <= m.start():  # the tokens before the match's stay as they are
            at += len(pieces[keep])
            keep += 1
        edited = self._pattern.sub(lambda w: self._new(w, text), text)[at:]
        return (out[:keep] + codec.encode(edited, add_special_tokens=False, parse_special=False))[:k]

    def _new(self, m: re.Match, text: str) -> str:
        old, new = m.group(0), self._words[m.group(0)]
        at = m.start() - new.find(old)  # where the new word would begin if this old one is inside it
        made = old in new and at >= 0 and text.startswith(new, at)  # "data" in "raw_data_v2", "return await"
        return old if made else new

    def _derive(self, codec: TextCodec | None) -> None:
        made = (tuple(self.items()), codec)
        if made == self._made:
            return
        self._made, self._words, self._tokens = made, {}, {}
        found = []
        for old, new in made[0]:
            word = word_edit(codec.decode(list(old)), codec.decode(list(new))) if codec is not None else None
            if word is None:
                self._tokens[old] = new
            elif word[0] not in self._words:  # the first learned form of a word stays (a stem before a singular)
                self._words[word[0]] = word[1]
                found.append(word[2])
        found.sort(key=len, reverse=True)  # the longest old word first
        self._pattern = re.compile("|".join(found)) if found else None


def word_edit(a: str, b: str) -> tuple[str, str, str] | None:
    """Old text a -> new text b as a word edit (old, new, the regex that finds old), or None (no
    letter or digit edited, or a character split across the spans' tokens). The edit covers the
    letter-and-digit runs in which a and b differ ("_" separates: "load_readings" -> "load_measurements"
    edits "readings"), found after no other letter or digit; a plural "s" both end in is left off
    (the stem renames both forms). An edit of 3 characters or fewer covers the whole identifier
    instead, found only as such (" get_value" -> " set_value", never "get" -> "set")."""
    if "\ufffd" in a + b:
        return None
    old, new = _around_diff(a, b, _ALNUM)
    if len(old) <= MIN_STEM:
        old, new = _around_diff(a, b, _WORD)
        return (old, new, rf"(?<!\w){re.escape(old)}(?!\w)") if old and _WORD.match(old[0]) else None
    if old.endswith("s") and new.endswith("s") and len(new) > MIN_STEM + 1:
        old, new = old[:-1], new[:-1]
        return old, new, rf"(?<![^\W_]){re.escape(old)}(?=s?(?![^\W_]))"
    return (old, new, rf"(?<![^\W_]){re.escape(old)}(?![^\W_])") if _ALNUM.match(old[0]) else None


def _around_diff(a: str, b: str, inside: re.Pattern) -> tuple[str, str]:
    """a, b less their shared prefix and suffix, each cut back to a boundary of `inside` runs."""
    n = min(len(a), len(b))
    i = next((i for i in range(n) if a[i] != b[i]), n)
    while i and inside.match(a[i - 1]):
        i -= 1
    j = 0
    while j < n - i and a[-1 - j] == b[-1 - j]:
        j += 1
    while j and inside.match(a[len(a) - j]):
        j -= 1
    return a[i:len(a) - j], b[i:len(b) - j]


def _token_copy(tokens: list[int], start: int, k: int, subs: dict[tuple[int, ...], tuple[int, ...]]) -> list[int]:
    """k tokens of the copy from `start`, each span in subs replaced (longest first)."""
    if not subs:
        return tokens[start:start + k]
    lengths = sorted({len(o) for o in subs}, reverse=True)
    out, p = [], start
    while len(out) < k and p < len(tokens):
        old = next((o for o in (tuple(tokens[p:p + n]) for n in lengths) if o in subs), None)
        if old is None:
            out.append(tokens[p])
            p += 1
        else:
            out.extend(subs[old])
            p += len(old)
    return out[:k]
