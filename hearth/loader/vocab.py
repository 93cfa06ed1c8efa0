"""The vocabulary of a GGUF as llama.cpp reads it (`llama_vocab::impl::load` in src/llama-vocab.cpp):
tokens, scores, token attributes, special ids, add-BOS/EOS flags and the end-of-generation set,
including llama.cpp's fix-ups by token text (EOG detection, FIM tokens, gpt-oss, phi-3)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import IntFlag

import numpy as np
from gguf import Keys

from hearth.errors import ModelLoadError, UnsupportedError
from hearth.loader.gguf_loader import GGUFFile
from hearth.loader.pretokenizers import pre_tokenizer_spec

K = Keys.Tokenizer
log = logging.getLogger(__name__)


class Attr(IntFlag):
    """llama_token_attr bits."""
    UNDEFINED = 0
    UNKNOWN = 1 << 0
    UNUSED = 1 << 1
    NORMAL = 1 << 2
    CONTROL = 1 << 3
    USER_DEFINED = 1 << 4
    BYTE = 1 << 5
    LSTRIP = 1 << 7
    RSTRIP = 1 << 8


# tokenizer.ggml.token_type (gguf.TokenType: NORMAL=1 ... BYTE=6) -> attribute; other values UNDEFINED
_TYPE_TO_ATTR = np.array([Attr.UNDEFINED, Attr.NORMAL, Attr.UNKNOWN, Attr.CONTROL, Attr.USER_DEFINED,
                          Attr.UNUSED, Attr.BYTE], dtype=np.int32)
# Tokens split out of raw text before the model runs: control/unknown only with parse_special.
SPECIAL_ATTRS = Attr.CONTROL | Attr.USER_DEFINED | Attr.UNKNOWN


@dataclass(frozen=True, slots=True)
class _ModelDefaults:
    bos: int | None
    eos: int | None
    unk: int | None
    add_bos: bool
    add_space_prefix: bool
    slots: tuple[tuple[str, int], ...] = ()
    """Defaults of further special slots (slot, id)."""
    clean_spaces: bool = False
    """llama_detokenize's clean_spaces for a model without a gpt2 pre-tokenizer (gpt2's: its spec's)."""
    merges: bool = False
    """The tokenizer runs the file's BPE merges (refused without them)."""


# llama.cpp's per-model defaults, used when the GGUF does not say
_MODELS = {
    "llama": _ModelDefaults(bos=1, eos=2, unk=0, add_bos=True, add_space_prefix=True),  # SentencePiece
    "gpt2": _ModelDefaults(bos=11, eos=11, unk=None, add_bos=False, add_space_prefix=False),  # BPE
    # WordPiece (BERT): [CLS] is the BOS, [SEP] closes the text (add_sep); the space prefix is the
    # converter's phantom "\u2581" word start, which decoding drops from the first word
    "bert": _ModelDefaults(bos=101, eos=None, unk=100, add_bos=True, add_space_prefix=True,
                           slots=(("sep", 102), ("pad", 0), ("mask", 103)), clean_spaces=True),
    # Gemma 4's SentencePiece-style BPE (llama.cpp's LLAMA_VOCAB_PRE_TYPE_GEMMA4): ids from the file, BOS always
    # added (llama.cpp overrides a false add_bos_token for it), BPE's clean_spaces
    "gemma4": _ModelDefaults(bos=None, eos=None, unk=None, add_bos=True, add_space_prefix=False, clean_spaces=True,
                             merges=True),
}
_ALWAYS_ADD_BOS = ("gemma4",)
"""Models whose BOS llama.cpp adds whatever the file's add_bos_token says."""

# slot -> (GGUF keys, texts llama.cpp recognises when no key names the token)
_SPECIAL_SLOTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "bos": ((K.BOS_ID,), ()),
    "eos": ((K.EOS_ID,), ()),
    "unk": ((K.UNK_ID,), ()),
    "sep": ((K.SEP_ID,), ()),
    "pad": ((K.PAD_ID,), ()),
    "mask": ((K.MASK_ID,), ()),
    "eot": ((K.EOT_ID,), ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                          "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
                          "<\uff5cend\u2581of\u2581sentence\uff5c>", "<end_of_utterance>")),
    "eom": ((K.EOM_ID,), ("<|eom_id|>",)),
    "fim_pre": ((K.FIM_PRE_ID, K.PREFIX_ID), ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
                                              "<\uff5cfim\u2581begin\uff5c>", "<PRE>", "\u2581<PRE>",
                                              "<|code_prefix|>", "<|prefix|>")),
    "fim_suf": ((K.FIM_SUF_ID, K.SUFFIX_ID), ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
                                              "<\uff5cfim\u2581hole\uff5c>", "<SUF>", "\u2581<SUF>",
                                              "<|code_suffix|>", "<|suffix|>")),
    "fim_mid": ((K.FIM_MID_ID, K.MIDDLE_ID), ("<|fim_middle|>", "<fim-middle>", "<fim_middle>",
                                              "<\uff5cfim\u2581end\uff5c>", "<MID>", "\u2581<MID>",
                                              "<|code_middle|>", "<|middle|>")),
    "fim_pad": ((K.FIM_PAD_ID,), ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]")),
    "fim_rep": ((K.FIM_REP_ID,), ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>")),
    "fim_sep": ((K.FIM_SEP_ID,), ("<|file_sep|>",)),
}
# Texts that end generation in llama.cpp (besides eos/eot/eom and the FIM pad/repo/file-sep tokens).
EOG_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
             "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
             "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
             "<\uff5cend\u2581of\u2581sentence\uff5c>", "[e~[")
# markers the output parsers read, printed whatever the file says: gpt-oss's (harmony), which llama.cpp always
# parses and prints, and Gemma 4's (its converter writes them USER_DEFINED; some files retype them CONTROL)
_ALWAYS_USER_DEFINED = ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>",
                        "<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", '<|"|>')
# (tokens that must all be EOG, the one then dropped from EOG and its new attribute)
_EOG_EXCEPTIONS = ((("<|return|>", "<|call|>", "<|end|>"), "<|end|>", Attr.USER_DEFINED),
                   (("<|calls|>", "<|flush|>", "<|end|>"), "<|end|>", Attr.USER_DEFINED),
                   (("<|tool_response>", "</s>"), "</s>", Attr.NORMAL))


@dataclass(slots=True)
class GGUFVocab:
    model: str
    """tokenizer.ggml.model: "gpt2" (byte-level BPE), "llama" (SentencePiece), "bert" (WordPiece) or "gemma4"
    (BPE over SentencePiece pieces)."""
    pre: str
    tokens: list[str]
    token_to_id: dict[str, int]
    scores: np.ndarray | None
    attrs: np.ndarray
    """[n_vocab] int32 Attr bits after llama.cpp's fix-ups."""
    merges: list[str] | None
    special: dict[str, int | None]
    """bos, eos, eot, eom, unk, sep, pad, mask, fim_* ids (None where the model has none)."""
    add_bos: bool
    add_eos: bool
    add_sep: bool
    """Append the sep token ([SEP]) to an encoded text: llama.cpp's WPM (BERT) rule."""
    pair_sep: bool
    """The file's add_sep_token outside WPM: a sep token between a pair's two texts, as llama-server's
    format_prompt_rerank puts it after the first text's EOS (RoBERTa's `<s> q </s></s> d </s>`); never on
    one text. WPM's pair needs none: each text already ends with its [SEP]."""
    add_space_prefix: bool
    clean_spaces: bool
    ignore_merges: bool
    regexes: tuple[str, ...]
    eog_ids: frozenset[int]
    chat_template: str | None
    rerank_template: str | None = None
    """`tokenizer.chat_template.rerank`: a reranker's prompt with `{query}` and `{document}` places (llama.cpp's
    converter writes one for Qwen3-Reranker; hearth.engine.rerank_template)."""


def read_vocab(g: GGUFFile) -> GGUFVocab:
    model = str(g.get(K.MODEL, ""))
    defaults = _MODELS.get(model)
    if not model:  # was "tokenizer model '' (tokenizer.ggml.model) is not supported"
        raise ModelLoadError(f"{g.path}: this GGUF has no tokenizer (no tokenizer.ggml.model)")
    if defaults is None:
        raise UnsupportedError(f"{g.path}: tokenizer model {model!r} (tokenizer.ggml.model) is not "
                               f"supported; supported: {', '.join(sorted(_MODELS))}")
    tokens = read_tokens(g)
    token_to_id = dict(zip(tokens, range(len(tokens))))
    if len(token_to_id) != len(tokens):
        raise ModelLoadError(f"{g.path}: the vocabulary has duplicate tokens")
    pre = str(g.get(K.PRE, "")) if model == "gpt2" else "default"
    if not pre:
        log.warning("%s: no tokenizer.ggml.pre; using the 'default' pre-tokenizer as llama.cpp does "
                    "(tokenization may differ from the original model's)", g.path)
        pre = "default"
    spec = pre_tokenizer_spec(pre) if model == "gpt2" else None
    attrs = _read_attrs(g, len(tokens))
    special, by_text = _special_ids(g, defaults, spec, token_to_id, len(tokens))
    eog = _eog_ids(special, token_to_id)
    _fix_attrs(attrs, by_text, token_to_id, eog, str(g.get("general.name", "")).lower())
    add_bos = bool(g.get(K.ADD_BOS, spec.add_bos if spec else defaults.add_bos)) or model in _ALWAYS_ADD_BOS
    add_eos = bool(g.get(K.ADD_EOS, False))
    # WPM: llama.cpp's tokenize always wraps the text in [CLS] ... [SEP] (bos, sep), whatever the file's
    # add_* flags say (a converted BERT says add_eos with eos [SEP], and add_sep false)
    add_sep = model == "bert"
    if add_sep:
        add_bos, add_eos = True, False
    pair_sep = not add_sep and bool(g.get(K.ADD_SEP, False))
    for flag, slot in ((add_bos, "bos"), (add_eos, "eos"), (add_sep or pair_sep, "sep")):
        if flag and special[slot] is None:
            raise ModelLoadError(f"{g.path}: add_{slot}_token is true but no {slot} token id is set")
    merges = g.field_array(K.MERGES)
    if (model == "gpt2" or defaults.merges) and merges is None:
        raise ModelLoadError(f"{g.path}: BPE tokenizer without tokenizer.ggml.merges")
    scores = g.field_array(K.SCORES)
    return GGUFVocab(
        model=model, pre=pre, tokens=tokens, token_to_id=token_to_id,
        scores=None if scores is None else np.asarray(scores, dtype=np.float32), attrs=attrs,
        merges=merges, special=special, add_bos=add_bos, add_eos=add_eos, add_sep=add_sep, pair_sep=pair_sep,
        add_space_prefix=bool(g.get(K.ADD_PREFIX, defaults.add_space_prefix)),
        clean_spaces=spec.clean_spaces if spec else defaults.clean_spaces,
        ignore_merges=spec.ignore_merges if spec else False,
        regexes=spec.regexes if spec else (), eog_ids=frozenset(eog),
        chat_template=g.get(K.CHAT_TEMPLATE), rerank_template=g.get(K.CHAT_TEMPLATE_N.format(name="rerank")))


def read_tokens(g: GGUFFile) -> list[str]:
    """The vocabulary's token strings by id (the file's header only: what a draft model's fit is checked on)."""
    tokens = g.field_array(K.LIST)
    if not tokens:
        raise ModelLoadError(f"{g.path}: GGUF has no tokenizer.ggml.tokens vocabulary")
    if not all(tokens):  # llama.cpp names empty entries so they stay unique and unmatchable
        tokens = [t or f"[EMPTY_{i}]" for i, t in enumerate(tokens)]
    return tokens


def vocab_difference(target: list[str], draft: list[str]) -> str:
    """"" where two vocabularies give every id the same string (a draft's token ids mean to its target
    what they mean to it), else where they differ, in parentheses, each side named: the sizes, or the
    first id ("(49152 vs 151936 tokens)" left the reader to guess which was the draft's)."""
    if len(target) != len(draft):
        return f"(the target has {len(target)} tokens, the draft {len(draft)})"
    i = next((i for i, (a, b) in enumerate(zip(target, draft)) if a != b), None)
    return "" if i is None else f"(token {i} is {target[i]!r} in the target, {draft[i]!r} in the draft)"


def _read_attrs(g: GGUFFile, n_vocab: int) -> np.ndarray:
    types = g.field_array(K.TOKEN_TYPE)
    if types is None:
        return np.full(n_vocab, Attr.NORMAL, dtype=np.int32)
    types = np.asarray(types, dtype=np.int64)
    if len(types) < n_vocab:
        raise ModelLoadError(f"{g.path}: tokenizer.ggml.token_type has {len(types)} entries for "
                             f"{n_vocab} tokens")
    types = types[:n_vocab]
    known = (types >= 0) & (types < len(_TYPE_TO_ATTR))
    return np.where(known, _TYPE_TO_ATTR[np.where(known, types, 0)], Attr.UNDEFINED).astype(np.int32)


def _special_ids(g: GGUFFile, defaults: _ModelDefaults, spec, token_to_id: dict[str, int],
                 n_vocab: int) -> tuple[dict[str, int | None], list[int]]:
    """Special ids by slot, and the ids that were found by their text (llama.cpp makes those control)."""
    base = {"bos": defaults.bos if (spec is None or spec.default_bos) else None,
            "eos": defaults.eos, "unk": defaults.unk, **dict(defaults.slots)}
    special: dict[str, int | None] = {}
    by_text: list[int] = []
    for slot, (keys, texts) in _SPECIAL_SLOTS.items():
        tid = base.get(slot)
        tid = tid if tid is not None and tid < n_vocab else None
        for key in keys:
            value = g.get(key)
            if value is not None and 0 <= int(value) < n_vocab:
                tid = int(value)
        if tid is None:  # llama.cpp finds some by their text when no key names them
            tid = next((token_to_id[t] for t in texts if t in token_to_id), None)
            by_text += [] if tid is None else [tid]
        special[slot] = tid
    return special, by_text


def _eog_ids(special: dict[str, int | None], token_to_id: dict[str, int]) -> set[int]:
    eog = {special[s] for s in ("fim_pad", "fim_rep", "fim_sep", "eos", "eot", "eom")}
    eog |= {token_to_id[t] for t in EOG_TEXTS if t in token_to_id}
    eog.discard(None)
    return eog


def _fix_attrs(attrs: np.ndarray, by_text: list[int], token_to_id: dict[str, int],
               eog: set[int], model_name: str) -> None:
    """llama.cpp's by-text corrections, applied in place (and to `eog`)."""
    eog_by_text = [token_to_id[t] for t in EOG_TEXTS if t in token_to_id]
    for tid in by_text + eog_by_text:
        attrs[tid] |= Attr.CONTROL  # end-of-turn and FIM tokens are control tokens whatever the file says
    for text in _ALWAYS_USER_DEFINED:
        if text in token_to_id:
            attrs[token_to_id[text]] = Attr.USER_DEFINED
    for required, dropped, attr in _EOG_EXCEPTIONS:
        ids = [token_to_id.get(t) for t in required]
        if all(i is not None and i in eog for i in ids):
            eog.discard(token_to_id[dropped])
            attrs[token_to_id[dropped]] = attr
    if "phi-3" in model_name or "phi3" in model_name:  # llama.cpp strips spaces after phi-3's specials
        attrs[(attrs & SPECIAL_ATTRS) != 0] |= Attr.RSTRIP
        for text, on in (("</s>", True), ("<unk>", False), ("<s>", False), ("<|endoftext|>", False)):
            if text in token_to_id:
                tid = token_to_id[text]
                attrs[tid] = (attrs[tid] | Attr.RSTRIP) if on else (attrs[tid] & ~int(Attr.RSTRIP))
