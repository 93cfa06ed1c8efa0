"""Tokenizer built from GGUF metadata, producing the same ids as llama.cpp.

Splitting and merging run in Hugging Face `tokenizers` (Rust), configured by tokenizer_backend.py
from the vocabulary read by vocab.py; BOS/EOS handling and detokenization follow llama.cpp's
`llama_tokenize` / `llama_token_to_piece` / `llama_detokenize` and are done here."""

from __future__ import annotations

import re
import threading
from typing import Iterable

import numpy as np
import tokenizers

from hearth.errors import HearthError
from hearth.loader.gguf_loader import GGUFFile
from hearth.loader.tokenizer_backend import build_backend
from hearth.loader.vocab import SPECIAL_ATTRS, Attr, GGUFVocab, read_vocab


class TokenIdError(HearthError):
    """A token id outside the vocabulary."""


class InvalidTextError(HearthError):
    """Text that is not valid Unicode: a lone UTF-16 surrogate (a JSON body may spell one, "\\ud800")."""


_SURROGATE = re.compile("[\ud800-\udfff]")


def lone_surrogate(text: str) -> str | None:
    """Why `text` is not valid Unicode, naming its first lone surrogate (None: it is), as the server
    says it about the field that holds it (a JSON body may spell one, "\\ud800")."""
    if isinstance(text, str) and (m := _SURROGATE.search(text)):
        return (f"holds a lone UTF-16 surrogate (\\u{ord(m.group()):04x}, near "
                f"{text[max(0, m.start() - 20):m.start()]!r}): not valid Unicode")
    return None


def _check_text(text: str) -> None:
    """One line naming the first lone surrogate, which the backend refuses with a bare TypeError."""
    if why := lone_surrogate(text):
        raise InvalidTextError(f"the text {why}")


class Tokenizer:
    """encode/decode with llama.cpp semantics.

    parse_special defaults to True: control tokens written in the text (e.g. "<|im_start|>" in a
    rendered chat template) become their ids, as llama.cpp's server and HF `encode` do. Pass False
    for untrusted text that must never produce control tokens; user-defined tokens are still matched
    then, as in llama.cpp."""

    def __init__(self, vocab: GGUFVocab, backend: tokenizers.Tokenizer):
        self._vocab = vocab
        self._hf = backend
        self._lock = threading.Lock()  # guards the backend's encode_special_tokens switch
        self._pieces: tuple[list[bytes], list[bytes]] | None = None  # built on first decode
        self.vocab_size = len(vocab.tokens)
        self.bos_id: int | None = vocab.special["bos"]
        self.eos_id: int | None = vocab.special["eos"]
        self.unk_id: int | None = vocab.special["unk"]
        self.pad_id: int | None = vocab.special["pad"]
        self.eog_ids: frozenset[int] = vocab.eog_ids
        self.add_bos: bool = vocab.add_bos
        self.add_eos: bool = vocab.add_eos
        self.sep_id: int | None = vocab.special["sep"]
        self.add_sep: bool = vocab.add_sep
        self.pair_sep: bool = vocab.pair_sep
        self.chat_template: str | None = vocab.chat_template
        self.rerank_template: str | None = vocab.rerank_template

    @property
    def tokens(self) -> list[str]:
        """The vocabulary's token strings, by id (a draft model must have the same)."""
        return self._vocab.tokens

    @classmethod
    def from_gguf(cls, g: GGUFFile) -> Tokenizer:
        vocab = read_vocab(g)
        return cls(vocab, build_backend(vocab))

    @property
    def bos_token(self) -> str | None:
        return None if self.bos_id is None else self._vocab.tokens[self.bos_id]

    @property
    def eos_token(self) -> str | None:
        return None if self.eos_id is None else self._vocab.tokens[self.eos_id]

    def encode(self, text: str, add_special_tokens: bool = True, parse_special: bool = True) -> list[int]:
        """Token ids of `text`; add_special_tokens adds BOS/EOS where the model asks for them."""
        with self._lock:
            if self._hf.encode_special_tokens == parse_special:  # the flag means "do NOT parse"
                self._hf.encode_special_tokens = not parse_special
            try:
                ids = self._hf.encode(text, add_special_tokens=False).ids
            except TypeError:
                _check_text(text)  # checked only on failure: no cost for valid text
                raise
        if add_special_tokens:
            ids = [self.bos_id] * self.add_bos + ids + [self.eos_id] * self.add_eos + [self.sep_id] * self.add_sep
        return ids

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        """Text of `ids` as llama_detokenize(remove_special=skip, unparse_special=not skip) gives it:
        skipping drops control tokens and a leading BOS / trailing EOS the model adds; a SentencePiece
        space prefix is removed from the first token unless a BOS was dropped (llama.cpp's rule)."""
        return self.decode_bytes(ids, skip_special_tokens).decode("utf-8", errors="replace")

    def decode_bytes(self, ids: Iterable[int], skip_special_tokens: bool = False) -> bytes:
        ids = self._checked(ids)
        remove_space = self._vocab.add_space_prefix
        if skip_special_tokens and self.add_bos and ids and ids[0] == self.bos_id:
            # llama.cpp keeps the space when it dropped a BOS; WordPiece's first space is the phantom word start
            remove_space = self._vocab.model == "bert"
            ids = ids[1:]
        if skip_special_tokens and self.add_eos and ids and ids[-1] == self.eos_id:
            ids = ids[:-1]
        table = self._piece_tables()[1 if skip_special_tokens else 0]
        parts = [table[i] for i in ids]
        if remove_space and parts and parts[0][:1] == b" ":
            parts[0] = parts[0][1:]
        text = b"".join(parts)
        return _clean_spaces(text) if self._vocab.clean_spaces else text

    def token_to_bytes(self, token_id: int, skip_special_tokens: bool = False) -> bytes:
        """The bytes one token contributes (may be part of a UTF-8 character): for streaming."""
        self._checked([token_id])
        return self._piece_tables()[1 if skip_special_tokens else 0][token_id]

    def token_pieces(self) -> list[bytes]:
        """Every token's bytes, by id, control tokens as their text (llama.cpp's detokenize with special):
        what DRY's sequence breakers are matched against (hearth.sample.dry_breakers). Not to be modified."""
        return self._piece_tables()[0]

    def id_to_piece(self, token_id: int) -> str:
        """The vocabulary entry itself (e.g. "Ġhello", "▁world", "<0x0A>")."""
        self._checked([token_id])
        return self._vocab.tokens[token_id]

    def token_to_id(self, piece: str) -> int | None:
        return self._vocab.token_to_id.get(piece)

    def special(self, slot: str) -> int | None:
        """The id of a special slot as vocab.py found it (GGUF key or llama.cpp's token-text fallback):
        bos, eos, eot, pad, fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep ...; None where absent."""
        return self._vocab.special.get(slot)

    def is_control(self, token_id: int) -> bool:
        """Control/unknown tokens: printed only when special tokens are not skipped."""
        return bool(self._vocab.attrs[token_id] & (Attr.CONTROL | Attr.UNKNOWN))

    @property
    def special_ids(self) -> list[int]:
        """Control, user-defined and end-of-generation tokens (<|im_end|>, EOS, <tool_call>...)."""
        marked = np.flatnonzero(self._vocab.attrs & SPECIAL_ATTRS).tolist()
        return sorted(set(marked) | self.eog_ids)

    def _checked(self, ids: Iterable[int]) -> list[int]:
        ids = list(ids)
        if ids and (min(ids) < 0 or max(ids) >= self.vocab_size):
            bad = next(i for i in ids if not 0 <= i < self.vocab_size)
            raise TokenIdError(f"token id {bad} is outside the vocabulary (0..{self.vocab_size - 1})")
        return ids

    def _piece_tables(self) -> tuple[list[bytes], list[bytes]]:
        """(pieces with control tokens as text, pieces with control tokens empty)."""
        if self._pieces is None:
            self._pieces = _piece_tables(self._vocab)
        return self._pieces


def _piece_tables(vocab: GGUFVocab) -> tuple[list[bytes], list[bytes]]:
    """llama_token_to_piece for every token: control/unknown/user-defined tokens are their text,
    normal tokens are unescaped (SentencePiece) or byte-decoded (BPE), byte tokens one byte."""
    pieces = _NORMAL_PIECES[vocab.model](vocab.tokens)
    attrs = vocab.attrs
    for i in np.flatnonzero((attrs & Attr.BYTE) != 0).tolist():
        pieces[i] = bytes([int(vocab.tokens[i][3:5], 16)])
    text_ids = np.flatnonzero((attrs & (Attr.CONTROL | Attr.UNKNOWN | Attr.USER_DEFINED)) != 0)
    for i in text_ids.tolist():
        pieces[i] = vocab.tokens[i].encode("utf-8", "surrogatepass")
    odd = (attrs & (Attr.CONTROL | Attr.UNKNOWN | Attr.USER_DEFINED | Attr.NORMAL | Attr.BYTE)) == 0
    for i in np.flatnonzero(odd).tolist():  # unused/undefined tokens print nothing
        pieces[i] = b""
    hidden = list(pieces)
    for i in np.flatnonzero((attrs & (Attr.CONTROL | Attr.UNKNOWN)) != 0).tolist():
        hidden[i] = b""
    return pieces, hidden


def _spm_pieces(tokens: list[str]) -> list[bytes]:
    return [t.replace("\u2581", " ").encode("utf-8", "surrogatepass") for t in tokens]


def _gpt2_byte_chars() -> dict[int, int]:
    """GPT-2's byte <-> printable char table, as {ord(char): byte}."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    others = [b for b in range(256) if b not in printable]
    table = {b: b for b in printable}
    table.update({0x100 + n: b for n, b in enumerate(others)})
    return table


_BYTE_OF_CHAR = _gpt2_byte_chars()
_TO_LATIN1 = {c: chr(b) for c, b in _BYTE_OF_CHAR.items()}


def _bpe_piece(token: str) -> bytes:
    try:
        return token.translate(_TO_LATIN1).encode("latin-1")
    except UnicodeEncodeError:  # a char outside GPT-2's byte alphabet: keep it as UTF-8
        return b"".join(bytes([_BYTE_OF_CHAR[ord(c)]]) if ord(c) in _BYTE_OF_CHAR
                        else c.encode("utf-8", "surrogatepass") for c in token)


def _bpe_pieces(tokens: list[str]) -> list[bytes]:
    return list(map(_bpe_piece, tokens))


# WordPiece as llama.cpp stores it: "\u2581" starts a word, a continuation has no mark
_NORMAL_PIECES = {"llama": _spm_pieces, "gpt2": _bpe_pieces, "bert": _spm_pieces, "gemma4": _spm_pieces}

# llama_detokenize's clean_spaces passes: " ?" -> "?" (also ! . ,), " ' " -> "'", " 's" -> "'s" etc.
_SPACE_PUNCT = re.compile(rb" ([?!.,])")
_SPACED_QUOTE = re.compile(rb" ' ")
_SPACE_CONTRACTION = re.compile(rb" '(?=[sm]|re|ve)")


def _clean_spaces(text: bytes) -> bytes:
    text = _SPACE_PUNCT.sub(rb"\1", text)
    text = _SPACED_QUOTE.sub(b"'", text)
    return _SPACE_CONTRACTION.sub(b"'", text)
