"""Build a Hugging Face `tokenizers.Tokenizer` that splits text exactly like llama.cpp for a GGUF vocab.

BOS/EOS are added by hearth's Tokenizer, not here; special tokens become added tokens (control and
unknown ones "special", so `encode_special_tokens` turns their parsing off, as parse_special=False
does in llama.cpp; user-defined ones are always parsed, as in llama.cpp)."""

from __future__ import annotations

import numpy as np
from tokenizers import AddedToken, Regex, Tokenizer, models, normalizers, pre_tokenizers

from hearth.errors import ModelLoadError
from hearth.loader.spm_merges import spm_merges
from hearth.loader.vocab import SPECIAL_ATTRS, Attr, GGUFVocab

_SPACE = "\u2581"  # SentencePiece's visible space


def build_backend(vocab: GGUFVocab) -> Tokenizer:
    tk = _BUILDERS[vocab.model](vocab)
    tk.add_tokens(_added_tokens(vocab))
    return tk


def _build_bpe(vocab: GGUFVocab) -> Tokenizer:
    """Byte-level BPE (tokenizer.ggml.model == "gpt2"): regex splits, then bytes -> GPT-2 chars."""
    tk = Tokenizer(models.BPE(vocab.token_to_id, _bpe_merges(vocab), ignore_merges=vocab.ignore_merges))
    splits = [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in vocab.regexes]
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        splits + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    return tk


def _build_spm(vocab: GGUFVocab) -> Tokenizer:
    """SentencePiece BPE (tokenizer.ggml.model == "llama"), as llama.cpp's llm_tokenizer_spm runs it:
    no pre-splitting, spaces become U+2581, adjacent symbols merge highest score first, and pieces
    left outside the vocabulary fall back to <0xXX> byte tokens."""
    if vocab.scores is None:
        raise ModelLoadError("SentencePiece tokenizer without tokenizer.ggml.scores")
    unk = vocab.special["unk"]
    tk = Tokenizer(models.BPE(vocab.token_to_id, spm_merges(vocab), byte_fallback=True,
                              unk_token=None if unk is None else vocab.tokens[unk]))
    # llama.cpp puts the space prefix before every text fragment that follows a special token (or
    # starts the prompt); Prepend runs per fragment between added tokens, which is the same thing.
    steps = [normalizers.Prepend(_SPACE)] if vocab.add_space_prefix else []
    tk.normalizer = normalizers.Sequence(steps + [normalizers.Replace(" ", _SPACE)])
    return tk


def _build_gemma4(vocab: GGUFVocab) -> Tokenizer:
    """Gemma 4's BPE over SentencePiece pieces (tokenizer.ggml.model == "gemma4"), as llama.cpp's
    llm_tokenizer_bpe runs LLAMA_VOCAB_PRE_TYPE_GEMMA4: spaces become U+2581, the text is split into runs of
    newlines and runs of anything else (no word splitting), the file's merges by rank, a piece outside the
    vocabulary as its <0xXX> byte tokens. A run of newlines that is itself a token is that token (llama.cpp's
    fix, PR 21343): those tokens are added tokens here, so a longer run than any of them splits longest first
    where llama.cpp would merge it."""
    unk = vocab.special["unk"]
    tk = Tokenizer(models.BPE(vocab.token_to_id, _bpe_merges(vocab), byte_fallback=True,
                              unk_token=None if unk is None else vocab.tokens[unk]))
    tk.normalizer = normalizers.Replace(" ", _SPACE)
    tk.pre_tokenizer = pre_tokenizers.Split(Regex("[^\\n]+|[\\n]+"), behavior="isolated")
    tk.add_tokens([AddedToken(t, normalized=False) for t in vocab.tokens if t and not t.strip("\n")])
    return tk


def _build_wpm(vocab: GGUFVocab) -> Tokenizer:
    """WordPiece (tokenizer.ggml.model == "bert") as the model's own tokenizer (HF's BertNormalizer +
    BertPreTokenizer + WordPiece) runs it: lowercased, accents stripped, control characters dropped,
    punctuation and CJK characters each a word, then greedy longest-match pieces with the whole word [UNK]
    when one part matches nothing. llama.cpp's llm_tokenizer_wpm_session differs on a combining mark
    standing alone (its NFD maps precomposed letters only, so "cafe\u0301" keeps U+0301, where HF drops
    it) and on words past 100 characters (below); llama.cpp lowercases every model, so hearth does too (its
    converter keeps no flag)."""
    unk = vocab.special["unk"]
    pieces = _wordpiece_vocab(vocab)
    # llama.cpp matches a word of any length; HF's default gives a word past 100 chars [UNK] at once
    model = models.WordPiece(dict(zip(pieces, range(len(pieces)))), unk_token=pieces[unk],
                             continuing_subword_prefix=_CONTINUATION, max_input_chars_per_word=1 << 30)
    tk = Tokenizer(model)
    tk.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=True,
                                               lowercase=True)
    tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return tk


_CONTINUATION = "##"


def _wordpiece_vocab(vocab: GGUFVocab) -> list[str]:
    """The GGUF's tokens back in WordPiece's spelling: llama.cpp's converter (BertModel.set_vocab's
    phantom()) wrote a word start "w" as "\u2581w", a continuation "##w" as "w", and kept "[...]" tokens
    (and the special ones) as they were."""
    special = (vocab.attrs & SPECIAL_ATTRS) != 0
    out = []
    for t, s in zip(vocab.tokens, special.tolist()):
        if t.startswith(_SPACE):
            out.append(t[1:])
        elif s or (t.startswith("[") and t.endswith("]")):
            out.append(t)
        else:
            out.append(_CONTINUATION + t)
    return out


_BUILDERS = {"gpt2": _build_bpe, "llama": _build_spm, "bert": _build_wpm, "gemma4": _build_gemma4}


def _bpe_merges(vocab: GGUFVocab) -> list[tuple[str, str]]:
    """GGUF merges are "left right" split at the first space after position 0 (llama.cpp); pairs whose
    parts or result are not tokens are dropped, since `tokenizers` cannot represent them."""
    t2i = vocab.token_to_id
    out = []
    for m in vocab.merges:
        cut = m.find(" ", 1)
        if cut < 0:
            continue
        a, b = m[:cut], m[cut + 1:]
        if a in t2i and b in t2i and a + b in t2i:
            out.append((a, b))
    return out


def _added_tokens(vocab: GGUFVocab) -> list[AddedToken]:
    ids = np.flatnonzero(vocab.attrs & SPECIAL_ATTRS)
    out = []
    for i in ids.tolist():
        attr = int(vocab.attrs[i])
        special = bool(attr & (Attr.CONTROL | Attr.UNKNOWN))
        out.append(AddedToken(vocab.tokens[i], special=special, normalized=False,
                              lstrip=bool(attr & Attr.LSTRIP), rstrip=bool(attr & Attr.RSTRIP)))
    return out
