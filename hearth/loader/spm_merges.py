"""The merge table that makes BPE reproduce llama.cpp's SentencePiece tokenizer.

llama.cpp's llm_tokenizer_spm merges, at each step, the adjacent pair of symbols whose
concatenation is the best-scoring token (leftmost on ties). BPE ranked by that same score over every
(left, right) split of every token does the same thing, so `tokenizers` can run it in Rust. Finding
all splits is the expensive part for a 262k vocabulary (~1.5M split points), so it is vectorized."""

from __future__ import annotations

import numpy as np

from hearth.loader.array_cache import cache_key, cached_array
from hearth.loader.vocab import GGUFVocab


def spm_merges(vocab: GGUFVocab) -> list[tuple[str, str]]:
    """Every (left, right) whose concatenation is a token, both halves tokens too, best score first.

    Ties in score are the one place the order could differ from llama.cpp's (it takes the leftmost
    pair, BPE the earlier rank); real vocabularies give every normal token its own score. A Python
    loop over gemma3's 1.2M split points costs ~0.7 s; the hashed search ~0.4 s, kept on disk for the
    next load (hearth.loader.array_cache), plus ~0.2 s to build the string pairs `tokenizers` wants."""
    key = cache_key([b"\0".join(t.encode("utf-8", "surrogatepass") for t in vocab.tokens),
                     np.ascontiguousarray(vocab.scores, dtype=np.float32).tobytes()])
    pairs = cached_array("spm-merges", key, lambda: _ranked_pairs(vocab))
    get = vocab.tokens.__getitem__
    return list(zip(map(get, pairs[0].tolist()), map(get, pairs[1].tolist())))


def _ranked_pairs(vocab: GGUFVocab) -> np.ndarray:
    """int64 [2, n]: left and right token ids of every merge, best score first."""
    left, right, whole = _split_candidates(vocab.tokens)
    order = np.argsort(-vocab.scores[whole], kind="stable")
    return np.stack([left[order], right[order]])


_B = np.uint64(0x9E3779B97F4A7C15)  # odd, so invertible mod 2**64
_B_INV = np.uint64(pow(int(_B), -1, 1 << 64))


def _split_candidates(tokens: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(left id, right id, whole id) for every split of a token whose halves hash like tokens.

    hash(s) = sum_k (ord(s[k]) + 1) * B**k  (mod 2**64), keyed with the length; prefix hashes are
    differences of one running sum, suffix hashes those differences divided by B**offset."""
    lens = np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens))
    cps = np.frombuffer("".join(tokens).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    starts = np.cumsum(lens) - lens
    owner = np.repeat(np.arange(len(tokens)), lens)  # [total_chars] token of each char
    pos = np.arange(len(cps)) - starts[owner]  # [total_chars] offset of each char in its token
    max_len = int(lens.max())
    powers = np.cumprod(np.concatenate([[np.uint64(1)], np.full(max_len, _B)])).astype(np.uint64)
    inv_powers = np.cumprod(np.concatenate([[np.uint64(1)], np.full(max_len, _B_INV)])).astype(np.uint64)
    with np.errstate(over="ignore"):
        run = np.concatenate([[np.uint64(0)], np.cumsum((cps.astype(np.uint64) + 1) * powers[pos])])
        token_hash = run[starts + lens] - run[starts]
        keys = _key(token_hash, lens)
        # split points: every char that is not the first of its token; left = chars before it
        j = np.flatnonzero(pos > 0)
        tok, cut = owner[j], pos[j]
        table = _HashTable(keys)
        left_id = table.find(_key(run[j] - run[starts[tok]], cut))
        ok = left_id >= 0
        j, tok, cut, left_id = j[ok], tok[ok], cut[ok], left_id[ok]
        right_key = _key((run[starts[tok] + lens[tok]] - run[j]) * inv_powers[cut], lens[tok] - cut)
    right_id = table.find(right_key)
    ok = right_id >= 0
    left_id, right_id, tok = left_id[ok], right_id[ok], tok[ok]
    ok = _same_chars(cps, starts, lens, left_id, right_id, tok)  # rule out hash collisions
    return left_id[ok], right_id[ok], tok[ok]


def _same_chars(cps: np.ndarray, starts: np.ndarray, lens: np.ndarray, left: np.ndarray,
                right: np.ndarray, whole: np.ndarray) -> np.ndarray:
    """[n] bool: tokens[left] + tokens[right] == tokens[whole], compared char by char."""
    ok = lens[left] + lens[right] == lens[whole]
    n = np.where(ok, lens[whole], 0)  # chars to compare per candidate
    cand = np.repeat(np.arange(len(whole)), n)  # [chars] candidate of each compared char
    k = np.arange(len(cand)) - np.repeat(np.cumsum(n) - n, n)  # [chars] offset in the whole token
    cut = lens[left][cand]
    src = np.where(k < cut, starts[left][cand] + k, starts[right][cand] + k - cut)
    ok[cand[cps[starts[whole][cand] + k] != cps[src]]] = False
    return ok


def _key(h: np.ndarray, length: np.ndarray) -> np.ndarray:
    return h ^ (length.astype(np.uint64) * np.uint64(0xD6E8FEB86659FD93))


class _HashTable:
    """uint64 key -> row index, open addressing with linear probing, built and probed vectorized
    (binary search over 1.2M random queries is ~5x slower: every step is a cache miss)."""

    def __init__(self, keys: np.ndarray):
        self.bits = max(8, int(np.ceil(np.log2(max(len(keys), 1) * 4))))  # load factor <= 1/4
        self.mask = (1 << self.bits) - 1
        self.keys = np.zeros(1 << self.bits, dtype=np.uint64)
        self.rows = np.full(1 << self.bits, -1, dtype=np.int64)
        pending = np.arange(len(keys))
        slot = self._home(keys)
        while pending.size:
            free = self.rows[slot] < 0
            # one winner per free slot; everyone else moves on to the next slot
            taken, first = np.unique(slot[free], return_index=True)
            winners = pending[free][first]
            self.rows[taken], self.keys[taken] = winners, keys[winners]
            lost = np.ones(pending.size, dtype=bool)
            lost[np.flatnonzero(free)[first]] = False
            pending, slot = pending[lost], (slot[lost] + 1) & self.mask

    def _home(self, keys: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):  # Fibonacci hashing: the top bits of key * golden ratio
            return ((keys * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(64 - self.bits)).astype(np.int64)

    def find(self, queries: np.ndarray) -> np.ndarray:
        """Row of each query key, -1 where absent."""
        out = np.full(len(queries), -1, dtype=np.int64)
        active = np.arange(len(queries))
        slot = self._home(queries)
        while active.size:
            rows = self.rows[slot]
            hit = (rows >= 0) & (self.keys[slot] == queries[active])
            out[active[hit]] = rows[hit]
            more = (rows >= 0) & ~hit
            active, slot = active[more], (slot[more] + 1) & self.mask
        return out
