"""Tiny random BERT-family GGUFs (archs `bert`, `nomic-bert`), written as llama.cpp's converter writes
real ones (convert_hf_to_gguf.py BertModel / NomicBertModel), with a WordPiece vocabulary in its
"phantom space" spelling: a word start "w" stored as "\u2581w", a continuation "##w" as "w".

The vocabulary is BERT's layout ([PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103) so llama.cpp's
defaults for a file that names no special ids hold too; `hf_vocab()` is the same list as Hugging Face
spells it, for transformers' BertTokenizer."""

from __future__ import annotations

import gguf
from gguf import TokenType

SPECIALS = {0: "[PAD]", 100: "[UNK]", 101: "[CLS]", 102: "[SEP]", 103: "[MASK]"}
WORDS = ("the capital of france is paris hello world un believ cafe naive don t s it an embed ding model "
         "search query document token izer 2024 42 hearth . , ! ? ' - ( ) : ; \" $ % & * + = @ # / "
         "中 文 日 本 語 한 국 é ü")
PIECES = "##believ ##able ##s ##ing ##ed ##ly ##er ##iz ##ation ##ding ##ment ##e ##a ##t ##o ##n ##r ##x ##y ##z ##4 ##2"


def hf_vocab(size: int = 0) -> list[str]:
    """WordPiece tokens by id as BERT's vocab.txt lists them; `size`: padded with [unusedN] to it."""
    tokens = [SPECIALS.get(i, f"[unused{i - 1}]") for i in range(104)]
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)] + [str(d) for d in range(10)]
    for t in letters + ["##" + c for c in letters] + WORDS.split() + PIECES.split():
        if t not in tokens:
            tokens.append(t)
    tokens += [f"[unused{i}]" for i in range(len(tokens), size)]
    return tokens


def phantom(token: str) -> str:
    """convert_hf_to_gguf.py BertModel.set_vocab's spelling of one WordPiece token."""
    if token.startswith("[") and token.endswith("]"):
        return token
    return token[2:] if token.startswith("##") else "\u2581" + token


def write_bert_tokenizer(w: gguf.GGUFWriter, tokens: list[str], *, name_specials: bool = True) -> None:
    """The tokenizer section a converted BERT GGUF has; name_specials False: no special ids, no flags
    (an older file: llama.cpp's WPM defaults apply)."""
    w.add_tokenizer_model("bert")
    w.add_tokenizer_pre("default")
    w.add_token_list([phantom(t) for t in tokens])
    w.add_token_types([TokenType.CONTROL if i in SPECIALS else TokenType.NORMAL for i in range(len(tokens))])
    w.add_token_type_count(2)
    if name_specials:
        w.add_bos_token_id(101)
        w.add_eos_token_id(102)
        w.add_unk_token_id(100)
        w.add_sep_token_id(102)
        w.add_pad_token_id(0)
        w.add_mask_token_id(103)
        w.add_add_bos_token(True)
        w.add_add_eos_token(True)
